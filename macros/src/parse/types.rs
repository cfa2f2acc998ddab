//! Which argument types a kernel may take, decided from syntax alone.
//!
//! The device receives plain data: `Copy` scalars, device buffers as `&[T]` / `&mut [T]`, and the device
//! library's handles (`SymSlice<T>`, `SignalPad`, ...). Whether a named type really is one of those is
//! left to the `DeviceParam` bound the generated code puts on it; this module rejects what can never
//! work, with a message naming the fix, before the compiler reports something less clear.

use quote::ToTokens;
use syn::visit::{self, Visit};
use syn::{Ident, Type};

/// How an argument reaches the kernel.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum ParamKind {
    /// `&[T]`: a device buffer the kernel reads (the launcher borrows it shared).
    Slice,
    /// `&mut [T]`: a device buffer the kernel writes (the launcher borrows it mutably).
    SliceMut,
    /// Anything passed by value: a scalar or a device handle such as `SymSlice<T>`.
    ByValue,
}

/// Host heap types: each lives in host memory the GPU cannot address.
const HOST_HEAP_TYPES: &[&str] = &[
    "Vec",
    "String",
    "Box",
    "Rc",
    "Arc",
    "VecDeque",
    "LinkedList",
    "HashMap",
    "HashSet",
    "BTreeMap",
    "BTreeSet",
    "BinaryHeap",
    "CString",
    "OsString",
    "PathBuf",
    "Cow",
];

/// The device library's buffer handles, whose length `len(...)` relations may compare.
const BUFFER_HANDLES: &[&str] = &["SymSlice", "SymSliceMut"];

/// Classifies the type of argument `name`, or explains why a kernel cannot take it.
pub fn classify(name: &Ident, ty: &Type) -> syn::Result<ParamKind> {
    let ty = strip(ty);
    let mut found = Findings::default();
    found.visit_type(ty);
    if let Some(t) = &found.trait_object {
        return Err(syn::Error::new_spanned(
            ty,
            format!(
                "kernel argument `{name}` holds a trait object (`{}`): the device cannot call through a host \
                 vtable; take a concrete type (`&[T]`, `&mut [T]`, a device handle such as `SymSlice<T>`, or a \
                 `Copy` scalar)",
                tokens(t)
            ),
        ));
    }
    if let Type::Reference(r) = ty
        && !matches!(strip(&r.elem), Type::Slice(_))
    {
        return Err(host_reference(name, ty));
    }
    if let Some(heap) = &found.heap {
        let what = heap.segments.last().map(|s| s.ident.to_string()).unwrap_or_default();
        return Err(syn::Error::new_spanned(
            ty,
            format!(
                "kernel argument `{name}` uses `{what}`, a host heap allocation the GPU cannot address; take a \
                 device buffer instead (`&[T]` / `&mut [T]`, or `SymSlice<T>`) and launch with a `SymBuffer`"
            ),
        ));
    }
    if let Some(imp) = &found.impl_trait {
        return Err(syn::Error::new_spanned(
            imp,
            format!(
                "kernel argument `{name}` is `impl Trait`, which makes the kernel generic: its PTX entry needs \
                 one concrete signature; name the type"
            ),
        ));
    }
    if let Some(lt) = &found.lifetime {
        return Err(syn::Error::new_spanned(
            lt,
            format!(
                "kernel argument `{name}` names the lifetime `{}`: the device only sees plain addresses; elide \
                 it (`&[T]`, `&mut [T]`): the launcher ties each buffer to the launch guard's lifetime",
                tokens(lt)
            ),
        ));
    }
    if let Some(m) = &found.mac {
        return Err(syn::Error::new_spanned(
            m,
            format!("kernel argument `{name}`: write its type out, macros are not accepted in a kernel signature"),
        ));
    }
    match ty {
        Type::Reference(r) => {
            let Type::Slice(slice) = strip(&r.elem) else {
                return Err(host_reference(name, ty));
            };
            if let Some(inner) = nested_pointer(&slice.elem) {
                return Err(syn::Error::new_spanned(
                    inner,
                    format!(
                        "kernel argument `{name}`: the elements of a device buffer must be plain data, not \
                         references or pointers (`{}`)",
                        tokens(inner)
                    ),
                ));
            }
            Ok(if r.mutability.is_some() { ParamKind::SliceMut } else { ParamKind::Slice })
        }
        Type::Ptr(_) => Err(syn::Error::new_spanned(
            ty,
            format!(
                "kernel argument `{name}` is a raw pointer: take `&[T]` / `&mut [T]` or `SymSlice<T>` so the \
                 launcher can borrow the buffer for as long as the launch runs"
            ),
        )),
        Type::BareFn(_) => Err(syn::Error::new_spanned(
            ty,
            format!("kernel argument `{name}` is a function pointer: host code addresses mean nothing on the GPU"),
        )),
        Type::Slice(_) => Err(syn::Error::new_spanned(
            ty,
            format!("kernel argument `{name}` is an unsized slice: borrow it, `&[T]` or `&mut [T]`"),
        )),
        _ => {
            if let Some(inner) = nested_pointer(ty) {
                return Err(syn::Error::new_spanned(
                    inner,
                    format!(
                        "kernel argument `{name}` contains a reference or pointer (`{}`): by-value arguments are \
                         copied to the device and must be plain data",
                        tokens(inner)
                    ),
                ));
            }
            Ok(ParamKind::ByValue)
        }
    }
}

fn host_reference(name: &Ident, ty: &Type) -> syn::Error {
    syn::Error::new_spanned(
        ty,
        format!(
            "kernel argument `{name}` is a reference to host data (`{}`): a kernel can only borrow device \
             buffers, as `&[T]` or `&mut [T]`, or take device handles such as `SymSlice<T>` and `Copy` scalars \
             by value",
            tokens(ty)
        ),
    )
}

/// Whether `len(...)` can be taken of an argument of this kind and type.
pub fn has_len(kind: ParamKind, ty: &Type) -> bool {
    match kind {
        ParamKind::Slice | ParamKind::SliceMut => true,
        ParamKind::ByValue => match strip(ty) {
            Type::Path(p) => {
                p.qself.is_none() && p.path.segments.last().is_some_and(|s| BUFFER_HANDLES.iter().any(|h| s.ident == h))
            }
            _ => false,
        },
    }
}

/// `Option<X>` → `Some(X)`: an optional argument (any path whose last segment is `Option` with one type
/// argument, so `core::option::Option<X>` too).
pub fn option_inner(ty: &Type) -> Option<&Type> {
    let Type::Path(p) = strip(ty) else { return None };
    let last = p.path.segments.last()?;
    if p.qself.is_some() || last.ident != "Option" {
        return None;
    }
    match &last.arguments {
        syn::PathArguments::AngleBracketed(a) if a.args.len() == 1 => match a.args.first()? {
            syn::GenericArgument::Type(t) => Some(t),
            _ => None,
        },
        _ => None,
    }
}

/// Why an optional argument of this type cannot be one, if it cannot: only buffers may be optional.
pub fn check_optional(name: &Ident, outer: &Type, inner: &Type, kind: ParamKind) -> syn::Result<()> {
    if has_len(kind, inner) {
        return Ok(());
    }
    Err(syn::Error::new_spanned(
        outer,
        format!(
            "kernel argument `{name}`: only buffers may be optional (`Option<&[T]>`, `Option<&mut [T]>`, \
             `Option<SymSlice<T>>`, `Option<SymSliceMut<T>>`), not `{}`; pass a scalar that says what the kernel \
             should do instead",
            tokens(outer)
        ),
    ))
}

/// The element type of a buffer type (`&[E]`, `&mut [E]`, `SymSlice<E>`, `SymSliceMut<E>`).
pub fn buffer_element(ty: &Type) -> Option<&Type> {
    match strip(ty) {
        Type::Reference(r) => match strip(&r.elem) {
            Type::Slice(s) => Some(&s.elem),
            _ => None,
        },
        Type::Path(p) if p.qself.is_none() => {
            let last = p.path.segments.last()?;
            if !BUFFER_HANDLES.iter().any(|h| last.ident == h) {
                return None;
            }
            match &last.arguments {
                syn::PathArguments::AngleBracketed(a) => match a.args.first()? {
                    syn::GenericArgument::Type(t) => Some(t),
                    _ => None,
                },
                _ => None,
            }
        }
        _ => None,
    }
}

/// Whether a type is written as `u8`.
pub fn is_u8(ty: &Type) -> bool {
    matches!(strip(ty), Type::Path(p) if p.qself.is_none() && p.path.is_ident("u8"))
}

/// Whether a type names the device library's `SignalPad` (a handle, not a number).
pub fn is_signal_pad(ty: &Type) -> bool {
    matches!(strip(ty), Type::Path(p) if p.qself.is_none() && p.path.segments.last().is_some_and(|s| s.ident == "SignalPad"))
}

/// Drops parentheses and invisible groups around a type.
pub fn strip(mut ty: &Type) -> &Type {
    loop {
        match ty {
            Type::Paren(p) => ty = &p.elem,
            Type::Group(g) => ty = &g.elem,
            _ => return ty,
        }
    }
}

pub fn tokens(t: &impl ToTokens) -> String {
    // `quote` spaces every token; squeeze the common cases so messages read like source.
    t.to_token_stream()
        .to_string()
        .replace(" < ", "<")
        .replace("< ", "<")
        .replace(" >", ">")
        .replace("& ", "&")
        .replace(" ,", ",")
        .replace(":: ", "::")
        .replace(" ::", "::")
        .replace("[ ", "[")
        .replace(" ]", "]")
        .replace("' ", "'")
        .replace(" (", "(")
        .replace("( ", "(")
        .replace(" )", ")")
}

/// The first reference or raw pointer anywhere inside `ty` (array elements, tuple fields, generic arguments).
fn nested_pointer(ty: &Type) -> Option<&Type> {
    struct Find<'a>(Option<&'a Type>);
    impl<'a> Visit<'a> for Find<'a> {
        fn visit_type(&mut self, t: &'a Type) {
            if self.0.is_some() {
                return;
            }
            match t {
                Type::Reference(_) | Type::Ptr(_) | Type::BareFn(_) => self.0 = Some(t),
                _ => visit::visit_type(self, t),
            }
        }
    }
    let mut f = Find(None);
    f.visit_type(ty);
    f.0
}

/// What a type contains that no kernel argument may (the first of each).
#[derive(Default)]
struct Findings<'a> {
    trait_object: Option<&'a syn::TypeTraitObject>,
    impl_trait: Option<&'a syn::TypeImplTrait>,
    heap: Option<&'a syn::Path>,
    lifetime: Option<&'a syn::Lifetime>,
    mac: Option<&'a syn::TypeMacro>,
}

impl<'a> Visit<'a> for Findings<'a> {
    fn visit_type_trait_object(&mut self, t: &'a syn::TypeTraitObject) {
        self.trait_object.get_or_insert(t);
    }
    fn visit_type_impl_trait(&mut self, t: &'a syn::TypeImplTrait) {
        self.impl_trait.get_or_insert(t);
    }
    fn visit_type_macro(&mut self, t: &'a syn::TypeMacro) {
        self.mac.get_or_insert(t);
    }
    fn visit_type_path(&mut self, t: &'a syn::TypePath) {
        // A bare path naming a trait (`Box<Fn()>` in old editions) is not recognisable; `dyn` is required
        // in edition 2021+, so trait objects always show up as `TypeTraitObject`.
        if t.qself.is_none() && t.path.segments.last().is_some_and(|s| HOST_HEAP_TYPES.iter().any(|h| s.ident == h)) {
            self.heap.get_or_insert(&t.path);
        }
        visit::visit_type_path(self, t);
    }
    fn visit_lifetime(&mut self, lt: &'a syn::Lifetime) {
        if lt.ident != "_" {
            self.lifetime.get_or_insert(lt);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use syn::parse_quote;

    fn kind(ty: Type) -> syn::Result<ParamKind> {
        classify(&Ident::new("x", proc_macro2::Span::call_site()), &ty)
    }

    fn msg(ty: Type) -> String {
        match kind(ty) {
            Ok(k) => panic!("expected an error, got {k:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn accepted_kinds() {
        assert_eq!(kind(parse_quote!(&[f32])).unwrap(), ParamKind::Slice);
        assert_eq!(kind(parse_quote!(&'_ [f32])).unwrap(), ParamKind::Slice);
        assert_eq!(kind(parse_quote!(&mut [u64])).unwrap(), ParamKind::SliceMut);
        assert_eq!(kind(parse_quote!((&mut [u64]))).unwrap(), ParamKind::SliceMut);
        assert_eq!(kind(parse_quote!(u32)).unwrap(), ParamKind::ByValue);
        assert_eq!(kind(parse_quote!(SymSlice<f32>)).unwrap(), ParamKind::ByValue);
        assert_eq!(kind(parse_quote!(ferrocomm_device::SignalPad)).unwrap(), ParamKind::ByValue);
        assert_eq!(kind(parse_quote!(&[[f32; 4]])).unwrap(), ParamKind::Slice);
    }

    #[test]
    fn host_references() {
        assert!(msg(parse_quote!(&String)).contains("reference to host data (`&String`)"));
        assert!(msg(parse_quote!(&u32)).contains("reference to host data (`&u32`)"));
        assert!(msg(parse_quote!(&mut [u32; 4])).contains("reference to host data"));
        assert!(msg(parse_quote!(&str)).contains("reference to host data (`&str`)"));
        assert!(msg(parse_quote!(&[&u32])).contains("must be plain data, not references or pointers (`&u32`)"));
        assert!(msg(parse_quote!([&u32; 2])).contains("contains a reference or pointer (`&u32`)"));
    }

    #[test]
    fn heap_types_even_nested() {
        assert!(msg(parse_quote!(Vec<f32>)).contains("uses `Vec`, a host heap allocation"));
        assert!(msg(parse_quote!(&Vec<f32>)).contains("reference to host data (`&Vec<f32>`)"));
        assert!(msg(parse_quote!(&[String])).contains("uses `String`"));
        assert!(msg(parse_quote!(std::sync::Arc<u32>)).contains("uses `Arc`"));
        assert!(msg(parse_quote!(Box<u32>)).contains("uses `Box`"));
    }

    #[test]
    fn trait_objects_win_over_heap() {
        assert!(msg(parse_quote!(Box<dyn Fn()>)).contains("trait object (`dyn Fn()`)"));
        assert!(msg(parse_quote!(&dyn core::any::Any)).contains("trait object (`dyn core::any::Any`)"));
        assert!(msg(parse_quote!(&[Box<dyn Send>])).contains("trait object"));
    }

    #[test]
    fn other_rejections() {
        assert!(msg(parse_quote!(impl Copy)).contains("`impl Trait`, which makes the kernel generic"));
        assert!(msg(parse_quote!(&'a [u32])).contains("names the lifetime `'a`"));
        assert!(msg(parse_quote!(&'static [u32])).contains("names the lifetime `'static`"));
        assert!(msg(parse_quote!(SymSlice<'a, u32>)).contains("names the lifetime `'a`"));
        assert!(msg(parse_quote!(*mut u32)).contains("is a raw pointer"));
        assert!(msg(parse_quote!(fn(u32))).contains("function pointer"));
        assert!(msg(parse_quote!([u32])).contains("unsized slice"));
        assert!(msg(parse_quote!(my_type!())).contains("macros are not accepted"));
    }

    #[test]
    fn len_applies_to_buffers_only() {
        let yes: [Type; 4] = [
            parse_quote!(&[u8]),
            parse_quote!(&mut [u8]),
            parse_quote!(SymSlice<u8>),
            parse_quote!(ferrocomm_device::SymSliceMut<f32>),
        ];
        for ty in yes {
            assert!(has_len(kind(ty.clone()).unwrap(), &ty), "{}", tokens(&ty));
        }
        let no: [Type; 2] = [parse_quote!(u32), parse_quote!(SignalPad)];
        for ty in no {
            assert!(!has_len(kind(ty.clone()).unwrap(), &ty), "{}", tokens(&ty));
        }
    }
}
