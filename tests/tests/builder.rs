//! The PTX builder end to end: a kernels crate made from scratch in a temporary directory, built for
//! sm_80 and sm_90, and the errors a user meets (toolchain missing, crate that does not compile for the GPU,
//! ptxas refusing the PTX). These run cargo, so they skip on the GPU machine.

use std::fs;
use std::path::PathBuf;

use ferrocomm_builder::{Arch, BuildError, PtxBuilder, ptx_entries, ptxas};
use ferrocomm_tests::workspace_root;

fn needs_cargo() -> bool {
    if std::env::var_os("FERROCOMM_ON_DEVICE").is_some() {
        eprintln!("skipped: needs cargo, and FERROCOMM_ON_DEVICE=1 says this machine has none");
        return false;
    }
    true
}

/// A standalone kernels crate (no dependencies) with the given `lib.rs`, pinned to the workspace toolchain.
fn kernels_crate(lib_rs: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    fs::write(
        dir.path().join("Cargo.toml"),
        "[package]\nname = \"scratch-kernels\"\nversion = \"0.0.0\"\nedition = \"2024\"\n\n[workspace]\n",
    )
    .unwrap();
    fs::copy(workspace_root().join("rust-toolchain.toml"), dir.path().join("rust-toolchain.toml")).unwrap();
    fs::create_dir(dir.path().join("src")).unwrap();
    fs::write(dir.path().join("src/lib.rs"), lib_rs).unwrap();
    dir
}

/// The nested builds of these tests share the target directory of the workspace's own nested builds, where
/// `cargo test` has already compiled `core` for each architecture and flavour with the same flags: only the
/// scratch crate is compiled here.
fn shared_target_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from);
    target.unwrap_or_else(|| workspace_root().join("target")).join("ferrocomm-ptx")
}

const KERNELS: &str = r#"
#![no_std]
#![feature(abi_ptx, asm_experimental_arch)]

#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    unsafe { core::arch::asm!("trap;", options(noreturn)) }
}

#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn signal_release(flag: *mut u32, value: u32) {
    unsafe { core::arch::asm!("st.release.sys.u32 [{p}], {v};", p = in(reg64) flag, v = in(reg32) value) }
}

#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn scale(data: *mut f32, len: usize, by: f32) {
    let forwarded_warning = 1;
    let i: u32;
    unsafe { core::arch::asm!("mov.u32 {i}, %tid.x;", i = out(reg32) i) };
    let i = i as usize;
    if i < len {
        unsafe { *data.add(i) *= by };
    }
}
"#;

#[test]
fn builds_a_kernels_crate_from_scratch_for_each_arch() {
    if !needs_cargo() {
        return;
    }
    let krate = kernels_crate(KERNELS);
    let out = tempfile::tempdir().unwrap();
    let built = PtxBuilder::new(krate.path())
        .arch(Arch::SM_80)
        .arch(Arch::SM_90)
        .target_dir(shared_target_dir())
        .out_dir(out.path())
        .build()
        .unwrap_or_else(|e| panic!("{e}"));

    assert_eq!(built.krate, "scratch_kernels");
    assert_eq!(built.modules.iter().map(|m| m.arch).collect::<Vec<_>>(), [Arch::SM_80, Arch::SM_90]);
    for module in &built.modules {
        let ptx = fs::read_to_string(&module.path).unwrap();
        assert!(ptx.contains(&format!(".target {}", module.arch)), "wrong target in {}", module.path.display());
        let mut entries = ptx_entries(&ptx);
        entries.sort();
        assert_eq!(entries, ["scale", "signal_release"]);
        assert!(ptx.contains("st.release.sys.u32"), "the inline asm is missing");
    }
    assert!(built.sources.iter().any(|s| s.ends_with("src/lib.rs")), "dep-info lost: {:?}", built.sources);
    assert!(
        built.warnings.iter().any(|w| w.contains("unused variable") && w.contains("forwarded_warning")),
        "the nested compiler's warning must come back once, rendered: {:?}",
        built.warnings
    );
    assert_eq!(built.warnings.len(), 1, "one warning, not one per arch: {:?}", built.warnings);

    let include = fs::read_to_string(out.path().join(ferrocomm_builder::INCLUDE_FILE)).unwrap();
    assert!(include.contains("(80u32, include_str!(") && include.contains("(90u32, include_str!("), "{include}");
    // The traced flavour: the newest architecture only, PTX only, embedded through its own include file.
    assert_eq!(built.traced.iter().map(|m| (m.arch, m.cubin.is_some())).collect::<Vec<_>>(), [(Arch::SM_90, false)]);
    let traced = fs::read_to_string(out.path().join(ferrocomm_builder::TRACE_INCLUDE_FILE)).unwrap();
    assert!(traced.contains("(90u32, include_str!(") && !traced.contains("80u32"), "{traced}");
}

#[test]
fn a_crate_that_does_not_compile_for_the_gpu_is_reported_with_the_compiler_error() {
    if !needs_cargo() {
        return;
    }
    let krate = kernels_crate("#![no_std]\npub fn host_only() -> std::vec::Vec<u8> { todo!() }\n");
    let out = tempfile::tempdir().unwrap();
    let err = PtxBuilder::new(krate.path())
        .arch(Arch::SM_90)
        .target_dir(shared_target_dir())
        .out_dir(out.path())
        .build()
        .expect_err("a no_std crate naming std must not build");
    let msg = err.to_string();
    assert!(matches!(err, BuildError::KernelCompile { .. }), "{msg}");
    assert!(msg.contains("does not compile for nvptx64-nvidia-cuda"), "{msg}");
    assert!(msg.contains("std"), "the compiler's own error must be quoted: {msg}");
}

#[test]
fn a_missing_toolchain_names_the_install_command() {
    if !needs_cargo() {
        return;
    }
    let krate = kernels_crate(KERNELS);
    let out = tempfile::tempdir().unwrap();
    let err = PtxBuilder::new(krate.path())
        .toolchain("nightly-1999-01-01")
        .out_dir(out.path())
        .target_dir(shared_target_dir())
        .build()
        .expect_err("an uninstalled toolchain cannot build");
    let msg = err.to_string();
    assert!(matches!(err, BuildError::ToolchainNotInstalled { .. }), "{msg}");
    assert!(msg.contains("rustup toolchain install"), "{msg}");
}

#[test]
fn a_stable_toolchain_is_refused_with_the_fix() {
    if !needs_cargo() {
        return;
    }
    let stable = std::process::Command::new("rustup").args(["run", "stable", "rustc", "--version"]).output();
    if !stable.is_ok_and(|o| o.status.success()) {
        eprintln!("skipped: no stable toolchain installed to try");
        return;
    }
    let krate = kernels_crate(KERNELS);
    let err = PtxBuilder::new(krate.path())
        .toolchain("stable")
        .out_dir(tempfile::tempdir().unwrap().path())
        .build()
        .expect_err("stable cannot build core for nvptx64");
    assert!(matches!(err, BuildError::NotNightly { .. }), "{err}");
    assert!(err.to_string().contains("rust-toolchain.toml"), "{err}");
}

/// Where ptxas is, or `None` (visibly) when it is missing and not required.
fn ptxas_or_skip() -> Option<PathBuf> {
    match ptxas::find_ptxas() {
        ptxas::PtxasLocation::Found { path, .. } => Some(path),
        ptxas::PtxasLocation::Missing if ptxas::ptxas_required() => {
            panic!("FERROCOMM_REQUIRE_PTXAS=1 but ptxas is missing: pip install nvidia-cuda-nvcc==13.0.88")
        }
        ptxas::PtxasLocation::Missing => {
            eprintln!("skipped: ptxas not found (pip install nvidia-cuda-nvcc==13.0.88)");
            None
        }
    }
}

#[test]
fn ptxas_rejection_quotes_ptxas() {
    let Some(ptxas_bin) = ptxas_or_skip() else { return };
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.ptx");
    fs::write(
        &bad,
        ".version 7.8\n.target sm_90\n.address_size 64\n.visible .entry k()\n{\n\tst.release.bogus.u32 [0], 1;\n\tret;\n}\n",
    )
    .unwrap();
    let err = ptxas::validate(&ptxas_bin, &bad, Arch::SM_90).expect_err("ptxas must reject a bogus qualifier");
    let msg = err.to_string();
    assert!(matches!(err, BuildError::PtxasRejected { .. }), "{msg}");
    assert!(msg.contains("ptxas") && msg.contains("bad.ptx") && msg.contains("sm_90"), "{msg}");
    assert!(msg.lines().count() > 1, "ptxas's own message must be quoted: {msg}");
}
