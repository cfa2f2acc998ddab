//! The NVSHMEM link path, checked without a GPU: the kernels crate `ferrocomm-nvshmem-kernels` is built
//! both ways from one source — ordinary PTX, and linked with NVSHMEM's `libnvshmem_device.bc` — and the
//! linked modules assemble with ptxas for sm_80 and sm_90, carry NVSHMEM's version and device state, and
//! define (not just declare) the NVSHMEM functions the kernels call.
//!
//! Without the `nvidia-nvshmem-cu13` wheel the builder skips the flavour with a warning, and these tests
//! say so and pass — unless `FERROCOMM_REQUIRE_NVSHMEM=1` (CI sets it), where they fail.

use ferrocomm_builder::nvshmem::{PINNED_VERSION, nvshmem_required, ptx_version};
use ferrocomm_builder::ptxas::{PtxasLocation, find_ptxas, ptxas_required, validate};
use ferrocomm_builder::{Arch, ptx_entries};
use ferrocomm_nvshmem_kernels::__FERROCOMM_MODULE as MODULE;

/// The NVSHMEM flavour's `(compute capability, PTX)` pairs, or `None` (with a message) where the build
/// found no bitcode and none was required.
fn linked_or_skip() -> Option<&'static [(u32, &'static str)]> {
    let linked = MODULE.nvshmem_ptx();
    if linked.is_empty() {
        assert!(
            !nvshmem_required(),
            "FERROCOMM_REQUIRE_NVSHMEM=1 but ferrocomm-nvshmem-kernels has no NVSHMEM flavour: the build found no \
             libnvshmem_device.bc (python3 -m pip install nvidia-nvshmem-cu13==3.4.5)"
        );
        eprintln!("skipped: no NVSHMEM flavour was built (python3 -m pip install nvidia-nvshmem-cu13==3.4.5)");
        return None;
    }
    Some(linked)
}

#[test]
fn the_flavour_is_built_for_sm_80_and_sm_90() {
    let Some(linked) = linked_or_skip() else { return };
    assert_eq!(linked.iter().map(|m| m.0).collect::<Vec<_>>(), [80, 90]);
}

#[test]
fn every_linked_module_assembles_with_ptxas() {
    let Some(linked) = linked_or_skip() else { return };
    let ptxas = match find_ptxas() {
        PtxasLocation::Found { path, .. } => path,
        PtxasLocation::Missing => {
            assert!(!ptxas_required(), "FERROCOMM_REQUIRE_PTXAS=1 but no ptxas was found");
            eprintln!("skipped: ptxas not found (pip install nvidia-cuda-nvcc==13.0.88)");
            return;
        }
    };
    let dir = tempfile::tempdir().unwrap();
    for &(cc, ptx) in linked {
        let arch: Arch = format!("sm_{cc}").parse().unwrap();
        let path = dir.path().join(format!("nvshmem.sm_{cc}.ptx"));
        std::fs::write(&path, ptx).unwrap();
        // A whole-program assembly (no `-c`): an unresolved NVSHMEM call would fail here.
        validate(&ptxas, &path, arch).unwrap_or_else(|e| panic!("sm_{cc}: {e}"));
    }
}

#[test]
fn linked_modules_carry_nvshmems_version_and_device_state() {
    let Some(linked) = linked_or_skip() else { return };
    for &(cc, ptx) in linked {
        assert_eq!(ptx_version(ptx), Some(PINNED_VERSION), "sm_{cc}");
        // What `nvshmemx_cumodule_init` fills in when the host binds the module, and the launch context the
        // runtime writes before each launch.
        assert!(ptx.contains(".visible .const .align 8 .b8 nvshmemi_device_state_d["), "sm_{cc}: no device state");
        assert!(ptx.contains(".visible .global .align 8 .b8 FERROCOMM_LAUNCH_CTX[24]"), "sm_{cc}: no launch context");
        assert!(ptx.contains(&format!(".target sm_{cc}")) && ptx.contains(".version 8.5"), "sm_{cc}");
    }
}

#[test]
fn the_nvshmem_calls_are_linked_in_not_declared() {
    let Some(linked) = linked_or_skip() else { return };
    for &(cc, ptx) in linked {
        assert!(!ptx.contains(".extern .func"), "sm_{cc}: an NVSHMEM function was left unresolved");
        for defined in [
            ".visible .func nvshmemx_putmem_signal_nbi_block(",
            ".visible .func nvshmem_quiet()",
            ") nvshmem_signal_fetch(",
            ".visible .func nvshmemx_signal_op(",
            ".visible .func nvshmem_fence()",
            ") nvshmem_ptr(",
        ] {
            assert!(ptx.contains(defined), "sm_{cc}: `{defined}` is not defined in the module");
        }
        // NVSHMEM's transport layer came along with them: the put-with-signal and quiet it dispatches to.
        for callee in ["nvshmemi_transfer_put_signal", "nvshmemi_transfer_quiet"] {
            assert!(ptx.lines().any(|l| l.contains("call") && l.contains(callee)), "sm_{cc}: no call to {callee}");
        }
        // `--only-needed`: nothing of NVSHMEM's collectives, which no kernel calls.
        assert!(!ptx.contains("nvshmem_barrier_all") && !ptx.contains("nvshmemx_float_sum_reduce"), "sm_{cc}");
    }
}

/// The same source without NVSHMEM: ordinary PTX with the same entries and no trace of NVSHMEM, whose
/// remote-capable calls are the library's own release stores and acquire polls through the peer table.
#[test]
fn the_same_source_builds_without_nvshmem() {
    let plain = MODULE.ptx();
    assert_eq!(plain.iter().map(|m| m.0).collect::<Vec<_>>(), [90]);
    let ptx = plain[0].1;
    for symbol in ["nvshmemi_", "nvshmemx_", "nvshmem_quiet", "nvshmem_signal_fetch", "nvshmem_ptr"] {
        assert!(!ptx.contains(symbol), "the ordinary module mentions NVSHMEM's `{symbol}`");
    }
    assert!(ptx.contains("red.release.sys.global.add.u64") && ptx.contains("ld.acquire.sys"), "no signal path");
    let mut entries = ptx_entries(ptx);
    entries.sort_unstable();
    let want = [
        "nvshmem_all_gather",
        "nvshmem_all_reduce_f32",
        "nvshmem_all_reduce_sum_bf16",
        "nvshmem_all_reduce_sum_f16",
        "nvshmem_all_reduce_sum_f32",
        "nvshmem_all_to_all",
        "nvshmem_ping_pong",
        "nvshmem_put",
        "nvshmem_put_signal",
    ];
    assert_eq!(entries, want);
    if let Some(linked) = linked_or_skip() {
        for &(cc, ptx) in linked {
            let mut linked_entries = ptx_entries(ptx);
            linked_entries.sort_unstable();
            assert_eq!(linked_entries, entries, "sm_{cc}");
        }
    }
}
