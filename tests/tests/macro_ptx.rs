//! `#[kernel]`'s nvptx64 side: a scratch kernels crate using the workspace's `ferrocomm-device` is built to
//! PTX (and validated by ptxas when present) and each generated entry is checked: unmangled name, one
//! parameter per kernel argument, slices and symmetric handles passed by value as their `#[repr(C)]` ABI.
//! (The trybuild suite, `tests/macro-ui`, covers the host side.) Runs cargo, so it skips on the GPU machine.

use std::fs;
use std::path::PathBuf;

use ferrocomm_builder::{Arch, PtxBuilder, ptx_entries};
use ferrocomm_tests::workspace_root;

const KERNELS: &str = r#"
#![cfg_attr(target_arch = "nvptx64", no_std)]
#![cfg_attr(target_arch = "nvptx64", feature(abi_ptx, asm_experimental_arch))]
use ferrocomm_device::kernel;
use ferrocomm_device::prelude::*;

#[kernel(len(dst) == len(src), no_wait)]
pub fn scale(dst: &mut [f32], src: &[f32], by: f32) {
    let i = global_thread_idx();
    if i < dst.len() {
        dst[i] = src[i] * by;
    }
}

#[kernel(len(inbox) >= len(src))]
pub fn ring(src: &[f32], inbox: SymSliceMut<f32>, pad: SignalPad, enabled: bool) {
    let (rank, world) = (team::rank(), team::world());
    let next = (rank + 1) % world;
    if enabled {
        put_signal(Group::Block, inbox.peer(next).slice(0, src.len()), src, pad.peer(next, 0), SignalOp::Add(1));
    }
}

/// # Safety
/// `i < out.len()`.
#[kernel(no_wait)]
pub unsafe fn unchecked(out: &mut [u64], i: usize, table: SymSlice<u64>) {
    unsafe { *out.get_unchecked_mut(i) = table.len() as u64 }
}

#[kernel(no_wait)]
pub fn nothing() {}

#[kernel(no_wait, launch_bounds(128, 3))]
pub fn bounded(out: &mut [u32]) {
    out[0] = 1;
}

#[kernel(no_wait, launch_bounds(256), instances(bounded_u32<u32>, bounded_u64<u64>))]
pub fn bounded_generic<T: DeviceCopy + Default>(out: &mut [T]) {
    out[0] = T::default();
}
"#;

/// The `.param` declarations of entry `name`, in order.
fn entry_params<'p>(ptx: &'p str, name: &str) -> Vec<&'p str> {
    let head = format!(".visible .entry {name}(");
    let start = ptx.find(&head).unwrap_or_else(|| panic!("no entry {name}")) + head.len();
    let end = start + ptx[start..].find(')').unwrap();
    ptx[start..end].split(',').map(str::trim).filter(|p| !p.is_empty()).collect()
}

#[test]
fn kernel_entries_have_the_abi_of_their_arguments() {
    if std::env::var_os("FERROCOMM_ON_DEVICE").is_some() {
        eprintln!("skipped: needs cargo, and FERROCOMM_ON_DEVICE=1 says this machine has none");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let device = workspace_root().join("kernels-rs").join("device");
    fs::write(
        dir.path().join("Cargo.toml"),
        format!(
            "[package]\nname = \"macro-kernels\"\nversion = \"0.0.0\"\nedition = \"2024\"\n\n[workspace]\n\n\
             [dependencies]\nferrocomm-device = {{ path = {:?} }}\n",
            device.display().to_string()
        ),
    )
    .unwrap();
    fs::copy(workspace_root().join("rust-toolchain.toml"), dir.path().join("rust-toolchain.toml")).unwrap();
    fs::create_dir(dir.path().join("src")).unwrap();
    fs::write(dir.path().join("src/lib.rs"), KERNELS).unwrap();

    let out = tempfile::tempdir().unwrap();
    let built = PtxBuilder::new(dir.path())
        .arch(Arch::SM_90)
        .no_trace()
        // The workspace's nested target directory, where `core`, the device library and its macros were
        // compiled for sm_90 by `cargo test`'s own build: only this crate is compiled here.
        .target_dir(
            std::env::var_os("CARGO_TARGET_DIR")
                .map(PathBuf::from)
                .unwrap_or_else(|| workspace_root().join("target"))
                .join("ferrocomm-ptx"),
        )
        .out_dir(out.path())
        .build()
        .unwrap_or_else(|e| panic!("{e}"));
    let ptx = fs::read_to_string(&built.modules[0].path).unwrap();

    let mut entries = ptx_entries(&ptx);
    entries.sort();
    assert_eq!(
        entries,
        ["bounded", "bounded_u32", "bounded_u64", "nothing", "ring", "scale", "unchecked"],
        "only the kernels are entries, unmangled"
    );
    // `launch_bounds` becomes the entry's directives (for each instance), and its marker global is gone.
    let header = |name: &str| {
        let at = ptx.find(&format!(".visible .entry {name}(")).unwrap();
        let body = at + ptx[at..].find("\n{").unwrap();
        ptx[at..body].to_owned()
    };
    assert!(header("bounded").ends_with(")\n.maxntid 128, 1, 1\n.minnctapersm 3"), "{}", header("bounded"));
    for name in ["bounded_u32", "bounded_u64"] {
        assert!(header(name).ends_with(")\n.maxntid 256, 1, 1"), "{}", header(name));
    }
    assert!(!header("scale").contains(".maxntid"), "{}", header("scale"));
    assert!(!ptx.contains("__ferrocomm_launch_bounds__"), "a launch-bounds marker is left in the module");
    // RawSlice<T> {ptr, len}: 16 bytes; RawSym<T> {peers, local, len}: 24 bytes; scalars as themselves.
    assert_eq!(
        entry_params(&ptx, "scale"),
        [".param .align 8 .b8 scale_param_0[16]", ".param .align 8 .b8 scale_param_1[16]", ".param .f32 scale_param_2"]
    );
    assert_eq!(
        entry_params(&ptx, "ring"),
        [
            ".param .align 8 .b8 ring_param_0[16]",
            ".param .align 8 .b8 ring_param_1[24]",
            ".param .align 8 .b8 ring_param_2[24]",
            ".param .u8 ring_param_3"
        ]
    );
    assert_eq!(
        entry_params(&ptx, "unchecked"),
        [
            ".param .align 8 .b8 unchecked_param_0[16]",
            ".param .u64 unchecked_param_1",
            ".param .align 8 .b8 unchecked_param_2[24]"
        ]
    );
    assert!(entry_params(&ptx, "nothing").is_empty());
    // The body is inlined into its entry: no separate function for it.
    assert!(!ptx.contains("__ferrocomm_kernel_"), "a kernel body was not inlined");
    // Programmatic dependent launch: the context is read before the wait for the previous kernel, and the
    // body's `team::rank()` / `team::world()` reuse that read instead of loading again after it.
    let ring = &ptx[ptx.find(".visible .entry ring(").unwrap()..];
    let ring = &ring[..ring.find("\n}\n").unwrap()];
    let at = |needle: &str| ring.find(needle).unwrap_or_else(|| panic!("`{needle}` missing from ring:\n{ring}"));
    assert!(at("[FERROCOMM_LAUNCH_CTX]") < at("griddepcontrol.wait;"));
    assert!(at("griddepcontrol.wait;") < at("griddepcontrol.launch_dependents;"));
    assert_eq!(ring.matches("[FERROCOMM_LAUNCH_CTX]").count(), 1, "one read of rank and world:\n{ring}");
}
