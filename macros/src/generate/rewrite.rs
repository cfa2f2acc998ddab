//! Small rewrites of the user's types so they can be named where the generated code needs them.

use proc_macro2::Span;
use syn::visit_mut::{self, VisitMut};
use syn::{Lifetime, Path, PathSegment, Type};

/// `&[T]` → `&'static [T]` and `'_` → `'static`: the form used to name `<T as DeviceParam>::Abi` in a
/// signature, where an elided lifetime would be unconstrained. The ABI types do not depend on the
/// lifetime (`Abi: 'static`), so the projection is the same for every lifetime.
pub fn with_static_lifetimes(ty: &Type) -> Type {
    struct Static;
    impl VisitMut for Static {
        fn visit_type_reference_mut(&mut self, r: &mut syn::TypeReference) {
            if r.lifetime.is_none() {
                r.lifetime = Some(Lifetime::new("'static", Span::call_site()));
            }
            visit_mut::visit_type_reference_mut(self, r);
        }
        fn visit_lifetime_mut(&mut self, lt: &mut Lifetime) {
            if lt.ident == "_" {
                *lt = Lifetime::new("'static", lt.span());
            }
        }
    }
    let mut ty = ty.clone();
    Static.visit_type_mut(&mut ty);
    ty
}

/// `ty` with each type parameter `params[i]` replaced by `args[i]`: an argument type of one instance of a
/// generic kernel (`SymSliceMut<T>` → `SymSliceMut<f32>`).
pub fn substitute(ty: &Type, params: &[syn::Ident], args: &[Type]) -> Type {
    struct Subst<'a>(&'a [syn::Ident], &'a [Type]);
    impl VisitMut for Subst<'_> {
        fn visit_type_mut(&mut self, t: &mut Type) {
            if let Type::Path(p) = t
                && p.qself.is_none()
                && let Some(id) = p.path.get_ident()
                && let Some(i) = self.0.iter().position(|param| param == id)
            {
                *t = self.1[i].clone();
                return;
            }
            visit_mut::visit_type_mut(self, t);
        }
    }
    let mut ty = ty.clone();
    Subst(params, args).visit_type_mut(&mut ty);
    ty
}

/// Rewrites paths written in a module so they resolve the same from its child module `mod <kernel>`:
/// `self::X` → `super::X`, `super::X` → `super::super::X`. Bare names resolve through the child's
/// `use super::*;` and `crate::`/`::` paths are absolute.
pub fn into_child_module<T: Rebase>(mut node: T) -> T {
    node.rebase();
    node
}

/// Nodes [`into_child_module`] applies to.
pub trait Rebase {
    /// Rewrites the node in place.
    fn rebase(&mut self);
}

impl Rebase for Type {
    fn rebase(&mut self) {
        ChildModule.visit_type_mut(self);
    }
}

impl Rebase for syn::Generics {
    fn rebase(&mut self) {
        ChildModule.visit_generics_mut(self);
    }
}

impl Rebase for Path {
    fn rebase(&mut self) {
        ChildModule.visit_path_mut(self);
    }
}

struct ChildModule;

impl VisitMut for ChildModule {
    fn visit_path_mut(&mut self, path: &mut Path) {
        if path.leading_colon.is_none()
            && let Some(first) = path.segments.first_mut()
        {
            if first.ident == "self" {
                first.ident = syn::Ident::new("super", first.ident.span());
            } else if first.ident == "super" {
                let span = first.ident.span();
                path.segments.insert(0, PathSegment::from(syn::Ident::new("super", span)));
            }
        }
        visit_mut::visit_path_mut(self, path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quote::quote;
    use syn::parse_quote;

    fn s(ty: Type) -> String {
        quote!(#ty).to_string()
    }

    #[test]
    fn static_lifetimes() {
        assert_eq!(s(with_static_lifetimes(&parse_quote!(&mut [u32]))), "& 'static mut [u32]");
        assert_eq!(s(with_static_lifetimes(&parse_quote!(&'_ [u32]))), "& 'static [u32]");
        assert_eq!(s(with_static_lifetimes(&parse_quote!(Foo<'_, u8>))), "Foo < 'static , u8 >");
        assert_eq!(s(with_static_lifetimes(&parse_quote!(u32))), "u32");
    }

    #[test]
    fn substitution_replaces_type_parameters_only() {
        let params = [syn::Ident::new("T", Span::call_site()), syn::Ident::new("U", Span::call_site())];
        let args: [Type; 2] = [parse_quote!(f32), parse_quote!([u32; 4])];
        let sub = |ty: Type| s(substitute(&ty, &params, &args));
        assert_eq!(sub(parse_quote!(SymSliceMut<T>)), "SymSliceMut < f32 >");
        assert_eq!(sub(parse_quote!(&mut [U])), "& mut [[u32 ; 4]]");
        assert_eq!(sub(parse_quote!(Option<&[(T, U)]>)), "Option < & [(f32 , [u32 ; 4])] >");
        // Paths that merely start with or contain the name are other types.
        assert_eq!(sub(parse_quote!(T::Elem)), "T :: Elem");
        assert_eq!(sub(parse_quote!(TT)), "TT");
        assert_eq!(sub(parse_quote!(u32)), "u32");
    }

    #[test]
    fn child_module_paths() {
        assert_eq!(s(into_child_module(parse_quote!(self::A))), "super :: A");
        assert_eq!(s(into_child_module(parse_quote!(super::A<self::B>))), "super :: super :: A < super :: B >");
        assert_eq!(s(into_child_module(parse_quote!(crate::A))), "crate :: A");
        assert_eq!(s(into_child_module(parse_quote!(::x::A))), ":: x :: A");
        assert_eq!(s(into_child_module(parse_quote!(&[A]))), "& [A]");
        let p: Path = into_child_module(parse_quote!(self::MODULE));
        assert_eq!(quote!(#p).to_string(), "super :: MODULE");
    }
}
