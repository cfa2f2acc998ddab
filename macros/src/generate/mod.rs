//! Turning a validated [`Kernel`] into code: the nvptx64 entry (`device`), the host glue (`host`) and the
//! compile-time checks the compiler has to make for us (`Copy` by-value arguments).

mod device;
mod host;
mod rewrite;
#[cfg(test)]
mod tests;

use proc_macro2::TokenStream;
use quote::{quote, quote_spanned};
use syn::Attribute;
use syn::spanned::Spanned;

use crate::parse::{self, Kernel, ParamKind};

/// The user's attributes, sorted by where they go.
pub struct Attrs {
    /// `#[cfg(...)]`: on every generated item, so the kernel disappears as a whole.
    pub cfgs: Vec<Attribute>,
    /// Doc comments: on the host fn and the device entry.
    pub docs: Vec<Attribute>,
    /// Everything else (`#[allow]`, `#[inline]`, ...): on the function holding the body.
    pub rest: Vec<Attribute>,
}

impl Attrs {
    fn sort(attrs: &[Attribute]) -> Attrs {
        let mut out = Attrs { cfgs: Vec::new(), docs: Vec::new(), rest: Vec::new() };
        for a in attrs {
            let to = if a.path().is_ident("cfg") {
                &mut out.cfgs
            } else if a.path().is_ident("doc") {
                &mut out.docs
            } else {
                &mut out.rest
            };
            to.push(a.clone());
        }
        out
    }
}

/// `#[kernel(attr)] item` → the expansion, or `compile_error!`s next to the unchanged item.
pub fn expand(attr: TokenStream, item: TokenStream) -> TokenStream {
    match parse::parse_kernel(attr, item.clone()) {
        Ok(kernel) => {
            let out = generate(&kernel);
            if kernel.options.debug {
                print_expansion(&kernel, &out);
            }
            out
        }
        Err(e) => {
            // Keep the item so the rest of the crate (and the IDE) still sees the function.
            let errors = e.to_compile_error();
            quote!(#errors #item)
        }
    }
}

/// All generated items of a valid kernel.
pub fn generate(k: &Kernel) -> TokenStream {
    let attrs = Attrs::sort(&k.item.attrs);
    let device = device::device_items(k, &attrs);
    let host = host::host_items(k, &attrs);
    let copy = copy_checks(k, &attrs);
    quote!(#device #host #copy)
}

/// Every by-value argument must be `Copy`: each GPU thread gets its own bitwise copy of the launch
/// arguments, so a type with ownership (a destructor, a unique handle) would be duplicated. Only the
/// compiler knows which types are `Copy`; the check carries the argument type's span.
fn copy_checks(k: &Kernel, attrs: &Attrs) -> TokenStream {
    let mut checks = Vec::new();
    for entry in k.entries() {
        for (p, ty) in k.params.iter().zip(&entry.tys) {
            if p.kind == ParamKind::ByValue {
                checks.push(quote_spanned!(p.ty.span()=> by_value_kernel_arguments_must_be_copy::<#ty>();));
            }
        }
    }
    if checks.is_empty() {
        return TokenStream::new();
    }
    let cfgs = &attrs.cfgs;
    quote! {
        #(#cfgs)*
        const _: () = {
            const fn by_value_kernel_arguments_must_be_copy<T: ::core::marker::Copy>() {}
            #(#checks)*
        };
    }
}

/// `#[kernel(debug)]`: the expansion on stderr, formatted, while the crate compiles.
fn print_expansion(k: &Kernel, out: &TokenStream) {
    let text = match syn::parse2::<syn::File>(out.clone()) {
        Ok(file) => prettyplease::unparse(&file),
        Err(_) => out.to_string(),
    };
    eprintln!("// #[kernel] expansion of `{}`\n{text}", k.name());
}
