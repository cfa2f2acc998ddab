//! Reading and validating a `#[kernel]` item. Nothing here generates code: the result, a [`Kernel`], is
//! what `generate` turns into the device entry and the host glue.

mod options;
#[cfg(test)]
mod tests;
mod types;

pub use options::{LenOp, Options};
pub use types::{ParamKind, strip};

use proc_macro2::TokenStream;
use syn::ext::IdentExt;
use syn::{FnArg, Ident, ItemFn, Pat, ReturnType, Type};

/// A validated kernel.
pub struct Kernel {
    /// The function as the user wrote it (its body runs unchanged on the device and in the emulator).
    pub item: ItemFn,
    /// The attribute's options.
    pub options: Options,
    /// The arguments, in order.
    pub params: Vec<Param>,
}

/// One kernel argument.
pub struct Param {
    /// Its name.
    pub ident: Ident,
    /// Its type as written.
    pub ty: Type,
    /// How it reaches the device.
    pub kind: ParamKind,
}

impl Kernel {
    /// The kernel's name (also the PTX entry's unmangled name).
    pub fn name(&self) -> &Ident {
        &self.item.sig.ident
    }

    /// The PTX entry's name: the function's name without a raw identifier's `r#`.
    pub fn entry_name(&self) -> String {
        self.name().unraw().to_string()
    }
}

/// Collects every error of an item, so the user sees all of them at once.
#[derive(Default)]
struct Errors(Option<syn::Error>);

impl Errors {
    fn push(&mut self, e: syn::Error) {
        match &mut self.0 {
            Some(all) => all.combine(e),
            None => self.0 = Some(e),
        }
    }
    fn finish<T>(self, ok: T) -> syn::Result<T> {
        match self.0 {
            Some(e) => Err(e),
            None => Ok(ok),
        }
    }
}

/// Parses `#[kernel(attr)] item` into a [`Kernel`], or every reason it cannot be one.
pub fn parse_kernel(attr: TokenStream, item: TokenStream) -> syn::Result<Kernel> {
    let mut errors = Errors::default();
    let options = match options::parse_options(attr) {
        Ok(o) => Some(o),
        Err(e) => {
            errors.push(e);
            None
        }
    };
    let item: ItemFn = match syn::parse2(item) {
        Ok(item) => item,
        Err(e) => {
            errors.push(syn::Error::new(
                e.span(),
                format!("#[kernel] applies to a free function `pub fn name(args) {{ ... }}`: {e}"),
            ));
            return Err(errors.0.unwrap_or(e));
        }
    };
    check_signature(&item, &mut errors);
    let params = check_params(&item, &mut errors);
    if let Some(options) = &options {
        check_relations(options, &params, &mut errors);
    }
    let options = options.unwrap_or_default();
    errors.finish(Kernel { item, options, params })
}

/// Everything about the function except its arguments.
fn check_signature(item: &ItemFn, errors: &mut Errors) {
    let sig = &item.sig;
    let name = &sig.ident;
    if let Some(c) = &sig.constness {
        errors.push(syn::Error::new_spanned(c, format!("kernel `{name}` cannot be a `const fn`: it runs on the GPU")));
    }
    if let Some(a) = &sig.asyncness {
        errors.push(syn::Error::new_spanned(
            a,
            format!(
                "kernel `{name}` cannot be `async`: a launch is already asynchronous (the launcher returns a \
                 guard to wait on)"
            ),
        ));
    }
    if let Some(abi) = &sig.abi {
        errors.push(syn::Error::new_spanned(
            abi,
            format!(
                "remove `{}` from kernel `{name}`: #[kernel] generates the `extern \"ptx-kernel\"` entry itself",
                {
                    let mut s = String::from("extern");
                    if let Some(n) = &abi.name {
                        s.push_str(&format!(" \"{}\"", n.value()));
                    }
                    s
                }
            ),
        ));
    }
    if !sig.generics.params.is_empty() || sig.generics.where_clause.is_some() {
        errors.push(syn::Error::new_spanned(
            &sig.generics,
            format!(
                "kernel `{name}` cannot be generic: its PTX entry needs one concrete signature; write one kernel \
                 per type (a `macro_rules!` can stamp them out)"
            ),
        ));
    }
    if let Some(v) = &sig.variadic {
        errors.push(syn::Error::new_spanned(v, format!("kernel `{name}` cannot be variadic")));
    }
    if let ReturnType::Type(_, ty) = &sig.output {
        let unit = matches!(types::strip(ty), Type::Tuple(t) if t.elems.is_empty());
        if !unit {
            errors.push(syn::Error::new_spanned(
                ty,
                format!(
                    "kernel `{name}` cannot return a value: every GPU thread runs the body and the launch is \
                     asynchronous; write results into a `&mut [T]` (or `SymSliceMut<T>`) argument"
                ),
            ));
        }
    }
    for attr in &item.attrs {
        let path = attr.path();
        if path.is_ident("no_mangle") || path.is_ident("export_name") || path.is_ident("unsafe") {
            errors.push(syn::Error::new_spanned(
                attr,
                format!("remove this attribute: #[kernel] gives the PTX entry its unmangled name `{name}` itself"),
            ));
        }
    }
}

/// Each argument: a plain name and a type the device can hold.
fn check_params(item: &ItemFn, errors: &mut Errors) -> Vec<Param> {
    let name = &item.sig.ident;
    let mut params = Vec::new();
    for arg in &item.sig.inputs {
        let pt = match arg {
            FnArg::Receiver(r) => {
                errors.push(syn::Error::new_spanned(
                    r,
                    format!("kernel `{name}` is a free function: it cannot take `self`; pass buffers as arguments"),
                ));
                continue;
            }
            FnArg::Typed(pt) => pt,
        };
        if let Some(attr) = pt.attrs.first() {
            errors.push(syn::Error::new_spanned(
                attr,
                "attributes on kernel arguments are not supported (the device entry, the emulator and the \
                 launcher must agree on every argument)",
            ));
        }
        let ident = match &*pt.pat {
            Pat::Ident(p) if p.by_ref.is_none() && p.subpat.is_none() => p.ident.clone(),
            other => {
                errors.push(syn::Error::new_spanned(
                    other,
                    "kernel arguments must be plain names (`name: Type` or `mut name: Type`): the launcher reuses \
                     each name for its own parameter",
                ));
                continue;
            }
        };
        match types::classify(&ident, &pt.ty) {
            Ok(kind) => params.push(Param { ident, ty: (*pt.ty).clone(), kind }),
            Err(e) => errors.push(e),
        }
    }
    params
}

/// `len(a) == len(b)` must name two buffer arguments.
fn check_relations(options: &Options, params: &[Param], errors: &mut Errors) {
    for rel in &options.len_relations {
        for side in [&rel.lhs, &rel.rhs] {
            match params.iter().find(|p| p.ident == *side) {
                None => errors
                    .push(syn::Error::new(side.span(), format!("`len({side})`: the kernel has no argument `{side}`"))),
                Some(p) if !types::has_len(p.kind, &p.ty) => errors.push(syn::Error::new(
                    side.span(),
                    format!(
                        "`len({side})`: `{side}` is not a buffer; `len(...)` applies to `&[T]`, `&mut [T]`, \
                         `SymSlice<T>` and `SymSliceMut<T>` arguments"
                    ),
                )),
                Some(_) => {}
            }
        }
        if rel.lhs == rel.rhs {
            errors
                .push(syn::Error::new(rel.rhs.span(), format!("`{}` compares `{}` with itself", rel.text(), rel.lhs)));
        }
    }
}
