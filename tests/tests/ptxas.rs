//! Every PTX module the workspace builds — the communication library, the examples' kernels crate, the
//! test kernels — assembles with ptxas for sm_80 and sm_90. (The builder already runs ptxas during the
//! build when it finds one; this test makes the check part of the suite, and fails where ptxas is required.)

use ferrocomm_builder::Arch;
use ferrocomm_builder::ptxas::{PtxasLocation, find_ptxas, ptxas_required, validate};

/// (crate, compute capability, PTX) for every module of every kernels crate in the workspace.
fn every_module() -> Vec<(&'static str, u32, &'static str)> {
    let crates: [(&str, &'static [(u32, &'static str)]); 5] = [
        ("ferrocomm-kernels", ferrocomm_kernels::__FERROCOMM_MODULE.ptx()),
        ("custom-kernel", custom_kernel::__FERROCOMM_MODULE.ptx()),
        ("ferrocomm-golden-kernels", ferrocomm_golden_kernels::PTX),
        ("ferrocomm-runtime-kernels", ferrocomm_runtime_kernels::__FERROCOMM_MODULE.ptx()),
        ("ferrocomm-device-kernels", ferrocomm_device_kernels::__FERROCOMM_MODULE.ptx()),
    ];
    crates.iter().flat_map(|&(name, modules)| modules.iter().map(move |&(cc, ptx)| (name, cc, ptx))).collect()
}

/// The ptxas to assemble with, or `None` (with a message) where there is none and none is required.
fn ptxas_or_skip() -> Option<std::path::PathBuf> {
    match find_ptxas() {
        PtxasLocation::Found { path, .. } => Some(path),
        PtxasLocation::Missing => {
            assert!(!ptxas_required(), "FERROCOMM_REQUIRE_PTXAS=1 but no ptxas was found");
            eprintln!("skipped: ptxas not found (pip install nvidia-cuda-nvcc==13.0.88)");
            None
        }
    }
}

#[test]
fn every_kernels_crate_has_sm_80_and_sm_90_modules() {
    for (name, _, _) in every_module() {
        let archs: Vec<u32> = every_module().iter().filter(|m| m.0 == name).map(|m| m.1).collect();
        assert!(archs.contains(&80) && archs.contains(&90), "{name} was built for {archs:?}");
    }
}

#[test]
fn every_module_assembles_with_ptxas() {
    let Some(ptxas) = ptxas_or_skip() else { return };
    let dir = tempfile::tempdir().unwrap();
    let modules = every_module();
    assert!(modules.len() >= 10, "five crates, two architectures each: {}", modules.len());
    // One ptxas per module at once: each is single-threaded, and the largest module takes it seconds.
    std::thread::scope(|s| {
        let running: Vec<_> = modules
            .iter()
            .map(|&(name, cc, ptx)| {
                let (dir, ptxas) = (dir.path(), &ptxas);
                s.spawn(move || {
                    let arch: Arch = format!("sm_{cc}").parse().unwrap();
                    let path = dir.join(format!("{name}.sm_{cc}.ptx"));
                    std::fs::write(&path, ptx).unwrap();
                    validate(ptxas, &path, arch).map_err(|e| format!("{name}: {e}"))
                })
            })
            .collect();
        for r in running {
            if let Err(e) = r.join().expect("a ptxas thread") {
                panic!("{e}");
            }
        }
    });
}

/// The bench's clock-stamp kernel, written in PTX for the modes that load no kernels crate.
#[test]
fn bench_stamp_kernel_assembles_with_ptxas() {
    let Some(ptxas) = ptxas_or_skip() else { return };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("stamp.ptx");
    std::fs::write(&path, ferrocomm_bench::gpu::stamp::STAMP_PTX).unwrap();
    for arch in ["sm_80", "sm_90"] {
        validate(&ptxas, &path, arch.parse().unwrap()).unwrap_or_else(|e| panic!("stamp kernel, {arch}: {e}"));
    }
}

/// Where the build found ptxas it embeds SASS beside the PTX, so that GPUs of the built architectures load
/// without a JIT: an sm_90 GPU gets the sm_90 cubin, an sm_86 one the sm_80 cubin, newer ones the PTX.
#[test]
fn every_kernels_crate_embeds_sass_where_ptxas_was_found() {
    // Without ptxas the build embedded PTX only.
    if ptxas_or_skip().is_none() {
        return;
    }
    let modules = [
        &ferrocomm_kernels::__FERROCOMM_MODULE,
        &custom_kernel::__FERROCOMM_MODULE,
        &ferrocomm_runtime_kernels::__FERROCOMM_MODULE,
        &ferrocomm_device_kernels::__FERROCOMM_MODULE,
    ];
    for module in modules {
        assert_eq!(module.sass_arches(), [80, 90], "{}", module.name());
        for (device, built) in [(90, 90), (86, 80), (80, 80)] {
            match module.image_for(device).unwrap() {
                ferrocomm::ModuleImage::Sass { cc, cubin } => {
                    assert_eq!(cc, built, "{}", module.name());
                    assert!(cubin.starts_with(b"\x7fELF"), "{}: a cubin is an ELF image", module.name());
                }
                other => panic!("{}: sm_{device} loads {other:?}", module.name()),
            }
        }
        assert!(module.image_for(100).unwrap().is_jit(), "{}: no SASS for sm_100", module.name());
    }
}
