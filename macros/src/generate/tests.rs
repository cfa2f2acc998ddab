//! The shape of the expansion: which items exist under which `cfg`, their signatures and docs. (Whether the
//! expansion compiles, runs and rejects misuse is the trybuild suite's job, in the `tests` crate.)

use super::expand;
use proc_macro2::TokenStream;
use quote::{ToTokens, quote};
use syn::{File, Item, ItemFn, ItemMod};

fn file(attr: TokenStream, item: TokenStream) -> File {
    let out = expand(attr, item);
    syn::parse2(out.clone()).unwrap_or_else(|e| panic!("expansion does not parse ({e}): {out}"))
}

fn text(t: &impl ToTokens) -> String {
    t.to_token_stream().to_string()
}

fn fns(f: &File) -> Vec<&ItemFn> {
    f.items.iter().filter_map(|i| if let Item::Fn(f) = i { Some(f) } else { None }).collect()
}

fn the_mod<'a>(f: &'a File, name: &str) -> &'a ItemMod {
    f.items.iter().find_map(|i| if let Item::Mod(m) = i { (m.ident == name).then_some(m) } else { None }).unwrap()
}

fn mod_fn<'a>(m: &'a ItemMod, name: &str) -> &'a ItemFn {
    let items = &m.content.as_ref().unwrap().1;
    items.iter().find_map(|i| if let Item::Fn(f) = i { (f.sig.ident == name).then_some(f) } else { None }).unwrap()
}

fn docs(f: &ItemFn) -> String {
    f.attrs.iter().filter(|a| a.path().is_ident("doc")).map(text).collect::<Vec<_>>().join("\n")
}

fn has_attr(f: &ItemFn, attr: &str) -> bool {
    f.attrs.iter().any(|a| text(a).replace(' ', "") == attr)
}

const KERNEL: fn() -> TokenStream = || {
    quote! {
        /// Scales.
        pub fn scale(dst: &mut [f32], src: &[f32], mut by: f32, sym: SymSlice<u32>) { dst[0] = src[0] * by; }
    }
};

#[test]
fn device_entry_is_unmangled_ptx_kernel_with_abi_arguments() {
    let f = file(quote!(), KERNEL());
    let entry = fns(&f).into_iter().find(|f| f.sig.abi.is_some()).unwrap();
    assert_eq!(entry.sig.ident, "scale");
    assert!(has_attr(entry, "#[cfg(target_arch=\"nvptx64\")]"));
    assert!(has_attr(entry, "#[unsafe(no_mangle)]"));
    assert_eq!(text(&entry.sig.abi), "extern \"ptx-kernel\"");
    assert!(entry.sig.unsafety.is_some());
    let params: Vec<String> = entry.sig.inputs.iter().map(text).collect();
    assert_eq!(
        params,
        [
            "dst : < & 'static mut [f32] as :: ferrocomm_device :: DeviceParam > :: Abi",
            "src : < & 'static [f32] as :: ferrocomm_device :: DeviceParam > :: Abi",
            "by : < f32 as :: ferrocomm_device :: DeviceParam > :: Abi",
            "sym : < SymSlice < u32 > as :: ferrocomm_device :: DeviceParam > :: Abi",
        ]
    );
    let d = docs(entry);
    assert!(d.contains("Scales.") && d.contains("# Safety"), "{d}");
    // The body lives in an inline(always) fn, called with every argument converted.
    let body = fns(&f).into_iter().find(|f| f.sig.ident == "__ferrocomm_kernel_scale").unwrap();
    assert!(has_attr(body, "#[inline(always)]") && has_attr(body, "#[cfg(target_arch=\"nvptx64\")]"));
    assert_eq!(text(&body.sig.inputs), "dst : & mut [f32] , src : & [f32] , mut by : f32 , sym : SymSlice < u32 >");
    assert_eq!(text(&entry.block).matches("from_abi").count(), 4);
    // The context preload, then the grid dependency of programmatic dependent launch, then the body.
    let block = text(&entry.block);
    let at = |s: &str| block.find(s).unwrap_or_else(|| panic!("`{s}` missing: {block}"));
    assert!(at("preload") < at("wait_prior_grids"), "{block}");
    assert!(at("wait_prior_grids") < at("launch_dependents") && at("launch_dependents") < at("from_abi"), "{block}");
}

#[test]
fn host_keeps_the_body_and_adds_the_launch_module() {
    let f = file(quote!(), KERNEL());
    let host = fns(&f).into_iter().find(|f| f.sig.ident == "scale" && f.sig.abi.is_none()).unwrap();
    assert!(has_attr(host, "#[cfg(not(target_arch=\"nvptx64\"))]"));
    assert_eq!(text(&host.block), text(&syn::parse2::<ItemFn>(KERNEL()).unwrap().block));

    let m = the_mod(&f, "scale");
    let launch = mod_fn(m, "launch");
    let params: Vec<String> = launch.sig.inputs.iter().map(text).collect();
    assert_eq!(
        params,
        [
            "team : & 'a :: ferrocomm :: Team",
            "cfg : :: ferrocomm :: LaunchConfig",
            "dst : < & 'static mut [f32] as :: ferrocomm :: LaunchParam > :: Host < 'a >",
            "src : < & 'static [f32] as :: ferrocomm :: LaunchParam > :: Host < 'a >",
            "by : < f32 as :: ferrocomm :: LaunchParam > :: Host < 'a >",
            "sym : < SymSlice < u32 > as :: ferrocomm :: LaunchParam > :: Host < 'a >",
        ]
    );
    assert!(text(&launch.sig.output).contains("LaunchGuard < 'a >"));
    assert!(launch.sig.unsafety.is_none());
    assert!(!text(&launch.block).contains("Requirement"));

    let emulate = mod_fn(m, "emulate");
    assert!(emulate.sig.unsafety.is_some() && docs(emulate).contains("# Safety"));
    assert_eq!(text(&emulate.block).matches("read_unaligned").count(), 4);

    let stat = text(&m.content.as_ref().unwrap().1.iter().find(|i| matches!(i, Item::Static(_))).unwrap());
    assert!(stat.contains("module : & crate :: __FERROCOMM_MODULE"), "{stat}");
    assert!(stat.contains("name : \"scale\"") && stat.contains("waits : true"), "{stat}");
}

#[test]
fn options_reach_the_expansion() {
    let f = file(quote!(no_wait, module = self::MY_MODULE, len(dst) == len(src), len(dst) >= len(sym)), KERNEL());
    let m = the_mod(&f, "scale");
    let stat = text(&m.content.as_ref().unwrap().1.iter().find(|i| matches!(i, Item::Static(_))).unwrap());
    assert!(stat.contains("module : & super :: MY_MODULE") && stat.contains("waits : false"), "{stat}");
    let launch = text(&mod_fn(m, "launch").block);
    assert_eq!(launch.matches("Requirement").count(), 2);
    assert!(launch.contains("relation : \"len(dst) == len(src)\""));
    assert!(launch.contains("relation : \"len(dst) >= len(sym)\""));
}

#[test]
fn by_value_arguments_are_checked_for_copy() {
    let f = file(quote!(), KERNEL());
    let consts: Vec<String> = f.items.iter().filter(|i| matches!(i, Item::Const(_))).map(text).collect();
    assert_eq!(consts.len(), 1);
    assert!(consts[0].contains("by_value_kernel_arguments_must_be_copy :: < f32 >"));
    assert!(consts[0].contains("by_value_kernel_arguments_must_be_copy :: < SymSlice < u32 > >"));
    assert!(!consts[0].contains("[f32]"));
}

#[test]
fn unsafe_kernels_have_unsafe_launchers() {
    let f = file(
        quote!(),
        quote!(
            pub unsafe fn k(x: &[u8]) {}
        ),
    );
    let launch = mod_fn(the_mod(&f, "k"), "launch");
    assert!(launch.sig.unsafety.is_some() && docs(launch).contains("# Safety"));
}

#[test]
fn cfg_attributes_go_on_every_item() {
    let f = file(
        quote!(),
        quote!(
            #[cfg(feature = "x")]
            #[allow(unused)]
            pub fn k(n: u32) {}
        ),
    );
    for item in &f.items {
        assert!(text(item).contains("# [cfg (feature = \"x\")]"), "{}", text(item));
    }
    // Other attributes stay on the functions holding the body.
    let allow = f.items.iter().filter(|i| text(i).contains("allow (unused)")).count();
    assert_eq!(allow, 2);
}

#[test]
fn errors_keep_the_item() {
    let out = expand(
        quote!(),
        quote!(
            pub fn k(v: Vec<u8>) -> u8 {
                0
            }
        ),
    );
    let s = out.to_string();
    assert_eq!(s.matches("compile_error").count(), 2, "{s}");
    assert!(s.ends_with("pub fn k (v : Vec < u8 >) -> u8 { 0 }"), "{s}");
}

#[test]
fn raw_identifiers_give_plain_entry_names() {
    let f = file(
        quote!(),
        quote!(
            pub fn r#loop(n: u32) {}
        ),
    );
    let m = the_mod(&f, "r#loop");
    let stat = text(&m.content.as_ref().unwrap().1.iter().find(|i| matches!(i, Item::Static(_))).unwrap());
    assert!(stat.contains("name : \"loop\""), "{stat}");
    assert!(fns(&f).iter().any(|f| f.sig.ident == "__ferrocomm_kernel_loop"));
}

#[test]
fn debug_changes_nothing_but_stderr() {
    let plain = expand(quote!(no_wait), KERNEL()).to_string();
    let debug = expand(quote!(no_wait, debug), KERNEL()).to_string();
    assert_eq!(plain, debug);
}

#[test]
fn launcher_docs_say_what_to_pass() {
    let f = file(
        quote!(len(dst) == len(src)),
        quote!(
            pub fn k(dst: &mut [f32], src: SymSlice<u8>, pad: SignalPad, n: u32) {}
        ),
    );
    let d = docs(mod_fn(the_mod(&f, "k"), "launch"));
    for line in [
        "`dst`: `&'a mut SymBuffer<f32>` (the kernel sees this rank's part as a slice)",
        "`src`: `&'a SymBuffer<u8>`",
        "`pad`: `&'a SignalPadBuffer`",
        "`n`: `u32`",
        "`Error::Requirement` unless `len(dst) == len(src)` holds",
        "`Error::NotCoResident`",
    ] {
        assert!(d.contains(line), "missing {line:?} in {d}");
    }
}

#[test]
fn relations_are_evaluated_in_checked_arithmetic() {
    let f = file(
        quote!(requires(len(dst) >= world() * len(src) + by)),
        quote!(
            pub fn k(dst: &mut [f32], src: &[f32], by: u32) {}
        ),
    );
    let launch = text(&mod_fn(the_mod(&f, "k"), "launch").block);
    for piece in [
        "relation : \"len(dst) >= world() * len(src) + by\"",
        "argument : \"dst\"",
        "kernel : kernel . name",
        "rank . world ()",
        "checked_mul",
        "checked_add",
        "\"len(dst) = {}, world() = {}, len(src) = {}, by = {}; {} >= {}\"",
    ] {
        assert!(launch.contains(piece), "missing {piece:?} in {launch}");
    }
    // The checks come after every argument is lowered (a foreign buffer is reported first) and before the
    // pack is built.
    let at = |s: &str| launch.find(s).unwrap_or_else(|| panic!("`{s}` missing: {launch}"));
    assert!(at(":: lower (") < at("Requirement") && at("Requirement") < at("ParamPack :: new"));
}

#[test]
fn optional_buffers_and_byte_views_pick_their_lowering() {
    let f = file(
        quote!(bytes(src)),
        quote!(
            pub fn k(src: Option<&[u8]>, out: Option<&mut [f32]>) {}
        ),
    );
    let launch = mod_fn(the_mod(&f, "k"), "launch");
    let params: Vec<String> = launch.sig.inputs.iter().skip(2).map(text).collect();
    assert_eq!(
        params,
        [
            "src : < Option < & 'static [u8] > as :: ferrocomm :: LaunchBytes > :: Host < 'a >",
            "out : < Option < & 'static mut [f32] > as :: ferrocomm :: LaunchParam > :: Host < 'a >",
        ]
    );
    let d = docs(launch);
    assert!(d.contains("`src`: `Option` of `ByteView<'a>` of a buffer of any element type"), "{d}");
    assert!(d.contains("`out`: `Option` of `&'a mut SymBuffer<f32>`"), "{d}");
    // `Option<&mut [f32]>` is not `Copy` and needs no check; nothing else is by value.
    assert!(!f.items.iter().any(|i| matches!(i, Item::Const(_))));
}

#[test]
fn generic_kernels_have_one_entry_per_instance() {
    let f = file(
        quote!(instances(k_f32<f32>, k_u8<u8>)),
        quote!(
            pub fn k<T: Element>(data: SymSliceMut<T>, n: u32) {}
        ),
    );
    let entries: Vec<&ItemFn> = fns(&f).into_iter().filter(|f| f.sig.abi.is_some()).collect();
    let names: Vec<String> = entries.iter().map(|e| e.sig.ident.to_string()).collect();
    assert_eq!(names, ["k_f32", "k_u8"]);
    assert_eq!(
        text(&entries[0].sig.inputs),
        "data : < SymSliceMut < f32 > as :: ferrocomm_device :: DeviceParam > :: Abi , n : < u32 as :: \
         ferrocomm_device :: DeviceParam > :: Abi"
    );
    assert!(text(&entries[1].block).contains("__ferrocomm_kernel_k :: < u8 >"), "{}", text(&entries[1].block));
    let body = fns(&f).into_iter().find(|f| f.sig.ident == "__ferrocomm_kernel_k").unwrap();
    assert_eq!(text(&body.sig.generics), "< T : Element >");

    // On the host: the generic body, one module per instance and the generic module.
    let host = fns(&f).into_iter().find(|f| f.sig.ident == "k" && f.sig.abi.is_none()).unwrap();
    assert_eq!(text(&host.sig.generics), "< T : Element >");
    let m = the_mod(&f, "k_u8");
    let stat = text(&m.content.as_ref().unwrap().1.iter().find(|i| matches!(i, Item::Static(_))).unwrap());
    assert!(stat.contains("name : \"k_u8\""), "{stat}");
    assert!(text(&mod_fn(m, "emulate").block).contains("super :: k :: < u8 >"));
    assert!(text(&mod_fn(m, "launch").sig.inputs).contains("SymSliceMut < u8 >"));

    let g = the_mod(&f, "k");
    let items = text(&g.content.as_ref().unwrap().1.iter().map(text).collect::<Vec<_>>().join("\n"));
    assert!(items.contains("pub trait Instance : __sealed :: Sealed"), "{items}");
    assert!(
        items.contains(
            "impl Instance for f32 { fn kernel () -> & 'static :: ferrocomm :: Kernel { & super :: k_f32 :: KERNEL } }"
        ),
        "{items}"
    );
    let launch = mod_fn(g, "launch");
    // One parameter: the bound goes beside the kernel's own (clippy wants bounds in one place).
    assert_eq!(text(&launch.sig.generics.params), "'a , T : Element + Instance");
    assert!(text(&launch.sig.inputs).contains("SymSliceMut < T >"));
    assert!(text(&launch.block).contains("< T as Instance > :: kernel ()"));
    // `Copy` is checked per instance: the instance's types, not the parameter.
    let consts: Vec<String> = f.items.iter().filter(|i| matches!(i, Item::Const(_))).map(text).collect();
    assert!(consts[0].contains("< SymSliceMut < f32 > >") && consts[0].contains("< SymSliceMut < u8 > >"));
    assert!(!consts[0].contains("< T >"));
}

#[test]
fn several_type_parameters_select_by_tuple() {
    let f = file(
        quote!(instances(k_a<f32, u8>)),
        quote!(
            pub fn k<T, U>(a: &[T], b: &mut [U]) {}
        ),
    );
    let g = the_mod(&f, "k");
    let items = g.content.as_ref().unwrap().1.iter().map(text).collect::<Vec<_>>().join("\n");
    assert!(items.contains("impl Instance for (f32 , u8 ,)"), "{items}");
    assert!(text(&mod_fn(g, "launch").sig.generics.where_clause).contains("(T , U ,) : Instance"));
}
