//! Reading and validating a `#[kernel]` item. Nothing here generates code: the result, a [`Kernel`], is
//! what `generate` turns into the device entry and the host glue.

mod options;
#[cfg(test)]
mod tests;
mod types;

pub use options::{ArithOp, CmpOp, LaunchBounds, Options, Relation, Term};
pub use types::{ParamKind, is_signal_pad, option_inner, strip, tokens};

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
    /// The type parameters of a generic kernel (each instance gives one type per parameter, in this order).
    pub type_params: Vec<Ident>,
}

/// One kernel argument.
pub struct Param {
    /// Its name.
    pub ident: Ident,
    /// Its type as written.
    pub ty: Type,
    /// How it reaches the device.
    pub kind: ParamKind,
    /// `Option<...>` around a buffer: the launcher takes `Option<buffer>`, the kernel sees `None` as `None`.
    pub optional: bool,
    /// Named in `bytes(...)`: the launcher takes a byte view of a buffer of any element type.
    pub bytes: bool,
}

impl Kernel {
    /// The kernel's name (also the PTX entry's unmangled name).
    pub fn name(&self) -> &Ident {
        &self.item.sig.ident
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
    let type_params = check_signature(&item, options.as_ref(), &mut errors);
    let mut params = check_params(&item, &mut errors);
    if let Some(options) = &options {
        check_relations(options, &params, &mut errors);
        check_bytes(options, &mut params, &mut errors);
    }
    let options = options.unwrap_or_default();
    errors.finish(Kernel { item, options, params, type_params })
}

/// Everything about the function except its arguments; returns its type parameters.
fn check_signature(item: &ItemFn, options: Option<&Options>, errors: &mut Errors) -> Vec<Ident> {
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
    let type_params = check_generics(item, options, errors);
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
    type_params
}

/// A generic kernel has type parameters only, and an instance list that sets every one of them.
fn check_generics(item: &ItemFn, options: Option<&Options>, errors: &mut Errors) -> Vec<Ident> {
    let name = &item.sig.ident;
    let generics = &item.sig.generics;
    let mut type_params = Vec::new();
    for param in &generics.params {
        match param {
            syn::GenericParam::Type(t) => type_params.push(t.ident.clone()),
            other => errors.push(syn::Error::new_spanned(
                other,
                format!(
                    "kernel `{name}` cannot be generic over a lifetime or a const: its PTX entries need concrete \
                     signatures; elide lifetimes, and pass a const as an argument"
                ),
            )),
        }
    }
    let Some(options) = options else { return type_params };
    let instances = &options.instances;
    if type_params.is_empty() {
        if let (Some(span), true) = (options.instances_span, generics.params.is_empty()) {
            errors.push(syn::Error::new(
                span,
                format!("`instances(...)` is for generic kernels: kernel `{name}` has no type parameters; remove it"),
            ));
        }
        if generics.where_clause.is_some() && generics.params.is_empty() {
            errors.push(syn::Error::new_spanned(&generics.where_clause, "a `where` clause needs type parameters"));
        }
        return type_params;
    }
    if instances.is_empty() {
        let params = type_params.iter().map(Ident::to_string).collect::<Vec<_>>().join(", ");
        errors.push(syn::Error::new_spanned(
            generics,
            format!(
                "kernel `{name}` cannot be generic without instances: each PTX entry needs concrete types; list \
                 them, `#[kernel(instances({name}_a<...>, {name}_b<...>))]`, one PTX entry per instance, each \
                 giving `<{params}>`"
            ),
        ));
    }
    let mut seen: Vec<(String, String)> = Vec::new();
    for inst in instances {
        let types = inst.types.iter().map(types::tokens).collect::<Vec<_>>().join(", ");
        if inst.types.len() != type_params.len() {
            errors.push(syn::Error::new(
                inst.name.span(),
                format!(
                    "instance `{}<{types}>` gives {} type argument(s); kernel `{name}` has {}",
                    inst.name,
                    inst.types.len(),
                    type_params.len()
                ),
            ));
        }
        if inst.name == *name {
            errors.push(syn::Error::new(
                inst.name.span(),
                format!(
                    "instance `{}` has the kernel's own name: `{name}` names the generic launcher; give the \
                     instance a name of its own (`{name}_{}`)",
                    inst.name,
                    types.replace(", ", "_")
                ),
            ));
        }
        for (other, other_types) in &seen {
            if inst.name == other.as_str() {
                errors.push(syn::Error::new(inst.name.span(), format!("instance `{other}` is listed twice")));
            } else if *other_types == types {
                errors.push(syn::Error::new(
                    inst.name.span(),
                    format!("instances `{other}` and `{}` are both `<{types}>`; keep one", inst.name),
                ));
            }
        }
        seen.push((inst.name.unraw().to_string(), types));
    }
    type_params
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
        let inner = types::option_inner(&pt.ty);
        let kind = match inner {
            // `Option<Option<...>>`: reported as what it is, not as the reference inside.
            Some(t) if types::option_inner(t).is_some() => {
                types::check_optional(&ident, &pt.ty, t, ParamKind::ByValue).map(|()| ParamKind::ByValue)
            }
            Some(t) => types::classify(&ident, t)
                .and_then(|kind| types::check_optional(&ident, &pt.ty, t, kind).map(|()| kind)),
            None => types::classify(&ident, &pt.ty),
        };
        match kind {
            Ok(kind) => {
                params.push(Param { ident, ty: (*pt.ty).clone(), kind, optional: inner.is_some(), bytes: false })
            }
            Err(e) => errors.push(e),
        }
    }
    params
}

impl Param {
    /// The buffer type inside `Option<...>`, or the type itself.
    pub fn inner_ty(&self) -> &Type {
        types::option_inner(&self.ty).unwrap_or(&self.ty)
    }
}

/// Every leaf of a relation names an argument of the right kind: `len(x)` a buffer that is always passed,
/// a bare `x` a number (or a by-value struct with integer fields). A relation names at least one argument
/// and does not compare an expression with itself.
fn check_relations(options: &Options, params: &[Param], errors: &mut Errors) {
    for rel in &options.relations {
        let text = rel.text();
        for leaf in rel.leaves() {
            let Some(arg) = leaf.argument() else { continue };
            let what = leaf.text();
            let Some(p) = params.iter().find(|p| p.ident == *arg) else {
                errors.push(syn::Error::new(
                    arg.span(),
                    format!("`{what}` in `{text}`: the kernel has no argument `{arg}`"),
                ));
                continue;
            };
            let buffer = types::has_len(p.kind, p.inner_ty());
            match leaf {
                Term::Len(_) if p.optional => errors.push(syn::Error::new(
                    arg.span(),
                    format!(
                        "`{what}` in `{text}`: `{arg}` is optional, and `None` has no length; relations apply to \
                         buffers that are always passed (check an optional buffer's length in the kernel, or \
                         make it a plain buffer)"
                    ),
                )),
                Term::Len(_) if !buffer => errors.push(syn::Error::new(
                    arg.span(),
                    format!(
                        "`{what}`: `{arg}` is not a buffer; `len(...)` applies to `&[T]`, `&mut [T]`, \
                         `SymSlice<T>` and `SymSliceMut<T>` arguments"
                    ),
                )),
                Term::Arg(..) if buffer || p.kind != ParamKind::ByValue => errors.push(syn::Error::new(
                    arg.span(),
                    format!(
                        "`{what}` in `{text}`: `{arg}` is a buffer, not a number; compare its length, `len({arg})`"
                    ),
                )),
                Term::Arg(..) if types::is_signal_pad(&p.ty) => errors.push(syn::Error::new(
                    arg.span(),
                    format!("`{what}` in `{text}`: `{arg}` is a signal pad, not a number"),
                )),
                _ => {}
            }
        }
        if rel.leaves().iter().all(|l| l.argument().is_none()) {
            errors.push(syn::Error::new(
                rel.span,
                format!(
                    "`{text}` names no argument of the kernel: a relation constrains what the caller passes; \
                     check the team in the kernel's body instead"
                ),
            ));
        }
        if rel.lhs.text() == rel.rhs.text() {
            errors.push(syn::Error::new(rel.span, format!("`{text}` compares `{}` with itself", rel.lhs.text())));
        }
    }
}

/// `bytes(x)` names a `u8` buffer argument (plain or optional), once.
fn check_bytes(options: &Options, params: &mut [Param], errors: &mut Errors) {
    for (i, arg) in options.bytes.iter().enumerate() {
        if options.bytes[..i].contains(arg) {
            errors.push(syn::Error::new(arg.span(), format!("`bytes({arg})` is given twice")));
            continue;
        }
        let Some(p) = params.iter_mut().find(|p| p.ident == *arg) else {
            errors.push(syn::Error::new(arg.span(), format!("`bytes({arg})`: the kernel has no argument `{arg}`")));
            continue;
        };
        match types::buffer_element(p.inner_ty()) {
            Some(elem) if types::is_u8(elem) => p.bytes = true,
            _ => errors.push(syn::Error::new(
                arg.span(),
                format!(
                    "`bytes({arg})`: `{arg}` is not a `u8` buffer; a byte view passes any buffer as bytes to a \
                     `&[u8]`, `&mut [u8]`, `SymSlice<u8>` or `SymSliceMut<u8>` argument (or one in `Option`)"
                ),
            )),
        }
    }
}
