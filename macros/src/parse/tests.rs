//! `parse_kernel` on sample items: what is accepted, and the message and span of every rejection.

use super::*;
use quote::quote;

fn ok(attr: TokenStream, item: TokenStream) -> Kernel {
    match parse_kernel(attr, item) {
        Ok(k) => k,
        Err(e) => panic!("expected a kernel, got: {e}"),
    }
}

/// Every error message of the item, in order.
fn errs(attr: TokenStream, item: TokenStream) -> Vec<String> {
    match parse_kernel(attr, item) {
        Ok(_) => panic!("expected errors"),
        Err(e) => e.into_iter().map(|e| e.to_string()).collect(),
    }
}

fn one(item: TokenStream) -> String {
    let mut e = errs(quote!(), item);
    assert_eq!(e.len(), 1, "{e:?}");
    e.remove(0)
}

#[test]
fn accepts_a_typical_kernel() {
    let k = ok(
        quote!(len(dst) == len(src), no_wait),
        quote! {
            /// Copies.
            #[allow(unused)]
            pub fn copy(dst: &mut [f32], src: &[f32], mut n: u32, sym: SymSlice<u8>) { let _ = (dst, src, n, sym); }
        },
    );
    assert_eq!(k.name(), "copy");
    let kinds: Vec<_> = k.params.iter().map(|p| (p.ident.to_string(), p.kind)).collect();
    assert_eq!(
        kinds,
        [
            ("dst".into(), ParamKind::SliceMut),
            ("src".into(), ParamKind::Slice),
            ("n".into(), ParamKind::ByValue),
            ("sym".into(), ParamKind::ByValue)
        ]
    );
    assert!(k.options.no_wait);
}

#[test]
fn accepts_unit_return_and_unsafe() {
    ok(
        quote!(),
        quote!(
            pub fn k(x: u32) -> () {}
        ),
    );
    ok(
        quote!(),
        quote!(
            pub unsafe fn k(x: &[u8]) {}
        ),
    );
    ok(
        quote!(),
        quote!(
            fn no_args() {}
        ),
    );
}

#[test]
fn rejects_return_values() {
    assert!(
        one(quote!(
            pub fn k(x: u32) -> u32 {
                x
            }
        ))
        .contains("kernel `k` cannot return a value")
    );
}

#[test]
fn rejects_generics_and_lifetimes() {
    assert!(
        one(quote!(
            pub fn k<T: Copy>(x: T) {}
        ))
        .contains("kernel `k` cannot be generic")
    );
    let e = errs(
        quote!(),
        quote!(
            pub fn k<'a>(x: &'a [u32]) {}
        ),
    );
    assert!(e[0].contains("cannot be generic") && e[1].contains("names the lifetime `'a`"), "{e:?}");
    assert!(
        one(quote!(
            pub fn k<const N: usize>() {}
        ))
        .contains("cannot be generic")
    );
    assert!(
        one(quote!(
            pub fn k(x: &'static [u32]) {}
        ))
        .contains("names the lifetime `'static`")
    );
}

#[test]
fn rejects_self_async_const_extern() {
    assert!(
        one(quote!(
            pub fn k(&self) {}
        ))
        .contains("cannot take `self`")
    );
    assert!(
        one(quote!(
            pub async fn k() {}
        ))
        .contains("cannot be `async`")
    );
    assert!(
        one(quote!(
            pub const fn k() {}
        ))
        .contains("cannot be a `const fn`")
    );
    assert!(
        one(quote!(
            pub extern "C" fn k() {}
        ))
        .contains("remove `extern \"C\"`")
    );
    assert!(
        one(quote!(
            #[unsafe(no_mangle)]
            pub fn k() {}
        ))
        .contains("remove this attribute")
    );
}

#[test]
fn rejects_patterns() {
    for item in [
        quote!(
            pub fn k((a, b): (u32, u32)) {}
        ),
        quote!(
            pub fn k(_: u32) {}
        ),
        quote!(
            pub fn k(ref a: u32) {}
        ),
        quote!(
            pub fn k(a @ 1..=2: u32) {}
        ),
    ] {
        assert!(one(item).contains("kernel arguments must be plain names"));
    }
}

#[test]
fn rejects_argument_attributes() {
    assert!(
        one(quote!(
            pub fn k(#[cfg(x)] a: u32) {}
        ))
        .contains("attributes on kernel arguments")
    );
}

#[test]
fn reports_every_bad_argument_at_once() {
    let e = errs(
        quote!(),
        quote!(
            pub fn k(a: &String, b: Vec<u8>, c: &dyn Fn(), d: u32) -> u8 {
                0
            }
        ),
    );
    assert_eq!(e.len(), 4, "{e:?}");
    assert!(e[0].contains("cannot return a value"));
    assert!(e[1].contains("`a` is a reference to host data (`&String`)"));
    assert!(e[2].contains("`b` uses `Vec`"));
    assert!(e[3].contains("`c` holds a trait object"));
}

#[test]
fn relations_must_name_buffers() {
    let item = quote!(
        pub fn k(a: &mut [u32], b: &[u32], n: u32, s: SymSlice<u32>) {}
    );
    ok(quote!(len(a) == len(b), len(s) >= len(a)), item.clone());
    let e = errs(quote!(len(a) == len(zz), len(n) <= len(b), len(a) == len(a)), item);
    assert_eq!(e.len(), 3, "{e:?}");
    assert!(e[0].contains("`len(zz)` in `len(a) == len(zz)`: the kernel has no argument `zz`"), "{e:?}");
    assert!(e[1].contains("`len(n)`: `n` is not a buffer"));
    assert!(e[2].contains("`len(a) == len(a)` compares `len(a)` with itself"), "{e:?}");
}

#[test]
fn option_and_item_errors_come_together() {
    let e = errs(
        quote!(wait),
        quote!(
            pub fn k() -> u8 {
                0
            }
        ),
    );
    assert_eq!(e.len(), 2, "{e:?}");
    assert!(e[0].contains("unknown `#[kernel]` option `wait`"));
}

#[test]
fn not_a_function() {
    let e = errs(
        quote!(),
        quote!(
            pub struct S;
        ),
    );
    assert!(e[0].contains("#[kernel] applies to a free function"), "{e:?}");
}

#[test]
fn errors_become_compile_error_invocations() {
    // Where each error points is checked by the trybuild suite (spans have no position outside rustc).
    let e = match parse_kernel(
        quote!(),
        quote!(
            pub fn k(a: u32, b: &Vec<u8>) {}
        ),
    ) {
        Err(e) => e,
        Ok(_) => panic!("expected an error"),
    };
    let ce = e.to_compile_error().to_string();
    assert!(ce.contains("compile_error"), "{ce}");
    assert!(ce.contains("`b` is a reference to host data (`&Vec<u8>`)"), "{ce}");
}

#[test]
fn relations_with_arithmetic_scalars_and_fields() {
    let item = quote!(
        pub fn k(out: &mut [u32], src: SymSlice<u32>, n: u32, plan: Plan, pad: SignalPad) {}
    );
    ok(quote!(requires(len(out) >= world() * len(src), len(src) == n + plan.extra * 2)), item.clone());
    let e = errs(quote!(requires(out >= n, len(src) >= pad, world() >= 2, len(zz) + 1 > n, n * 2 == n * 2)), item);
    assert_eq!(e.len(), 5, "{e:?}");
    assert!(e[0].contains("`out` in `out >= n`: `out` is a buffer, not a number; compare its length, `len(out)`"));
    assert!(e[1].contains("`pad` is a signal pad, not a number"), "{e:?}");
    assert!(e[2].contains("`world() >= 2` names no argument of the kernel"), "{e:?}");
    assert!(e[3].contains("`len(zz)` in `len(zz) + 1 > n`: the kernel has no argument `zz`"), "{e:?}");
    assert!(e[4].contains("`n * 2 == n * 2` compares `n * 2` with itself"), "{e:?}");
}

#[test]
fn optional_buffers() {
    let k = ok(
        quote!(),
        quote!(
            pub fn k(
                a: Option<&[f32]>,
                b: Option<&mut [u8]>,
                c: Option<SymSlice<u32>>,
                d: core::option::Option<SymSliceMut<u8>>,
            ) {
            }
        ),
    );
    let kinds: Vec<_> = k.params.iter().map(|p| (p.kind, p.optional)).collect();
    assert_eq!(
        kinds,
        [(ParamKind::Slice, true), (ParamKind::SliceMut, true), (ParamKind::ByValue, true), (ParamKind::ByValue, true)]
    );
    for item in [
        quote!(
            pub fn k(x: Option<u32>) {}
        ),
        quote!(
            pub fn k(x: Option<SignalPad>) {}
        ),
        quote!(
            pub fn k(x: Option<Option<&[u8]>>) {}
        ),
    ] {
        assert!(one(item).contains("kernel argument `x`: only buffers may be optional"));
    }
    // What is wrong inside the `Option` is reported as it is without one.
    assert!(
        one(quote!(
            pub fn k(x: Option<&Vec<u8>>) {}
        ))
        .contains("reference to host data (`&Vec<u8>`)")
    );
    let e = errs(
        quote!(len(a) == len(b)),
        quote!(
            pub fn k(a: Option<&[u8]>, b: &[u8]) {}
        ),
    );
    assert!(e[0].contains("`a` is optional, and `None` has no length"), "{e:?}");
}

#[test]
fn byte_views_name_u8_buffers() {
    let k = ok(
        quote!(bytes(a, b, c)),
        quote!(
            pub fn k(a: &[u8], b: Option<SymSliceMut<u8>>, c: SymSlice<u8>, d: &[u8]) {}
        ),
    );
    let bytes: Vec<_> = k.params.iter().map(|p| p.bytes).collect();
    assert_eq!(bytes, [true, true, true, false]);
    let e = errs(
        quote!(bytes(f, n, zz, a, a)),
        quote!(
            pub fn k(a: &[u8], f: &[f32], n: u8) {}
        ),
    );
    assert_eq!(e.len(), 4, "{e:?}");
    assert!(e[0].contains("`bytes(f)`: `f` is not a `u8` buffer"), "{e:?}");
    assert!(e[1].contains("`bytes(n)`: `n` is not a `u8` buffer"), "{e:?}");
    assert!(e[2].contains("`bytes(zz)`: the kernel has no argument `zz`"), "{e:?}");
    assert!(e[3].contains("`bytes(a)` is given twice"), "{e:?}");
}

#[test]
fn generic_kernels_list_their_instances() {
    let k = ok(
        quote!(instances(k_f32<f32>, k_u8<u8>)),
        quote!(
            pub fn k<T: Copy>(data: SymSliceMut<T>, n: u32) {}
        ),
    );
    assert_eq!(k.type_params, ["T"]);
    assert_eq!(k.options.instances.len(), 2);
    let two = ok(
        quote!(instances(k_a<f32, u8>)),
        quote!(
            pub fn k<T, U>(a: &[T], b: &mut [U])
            where
                T: Copy,
            {
            }
        ),
    );
    assert_eq!(two.type_params, ["T", "U"]);

    assert!(
        one(quote!(
            pub fn k<T: Copy>(x: &[T]) {}
        ))
        .contains("cannot be generic without instances")
    );
    let e = errs(
        quote!(instances(k_a<f32>, k_b<f32, u8>, k<u8>, k_a<u16>, k_c<f32>)),
        quote!(
            pub fn k<T>(x: &[T]) {}
        ),
    );
    assert_eq!(e.len(), 4, "{e:?}");
    assert!(e[0].contains("instance `k_b<f32, u8>` gives 2 type argument(s); kernel `k` has 1"), "{e:?}");
    assert!(e[1].contains("instance `k` has the kernel's own name"), "{e:?}");
    assert!(e[2].contains("instance `k_a` is listed twice"), "{e:?}");
    assert!(e[3].contains("instances `k_a` and `k_c` are both `<f32>`"), "{e:?}");
    assert!(
        errs(
            quote!(instances(k_a<f32>)),
            quote!(
                pub fn k(x: &[f32]) {}
            )
        )[0]
        .contains("`instances(...)` is for generic kernels: kernel `k` has no type parameters")
    );
}
