//! NVSHMEM's host library without a GPU: the runtime finds and opens the `nvidia-nvshmem-cu13` wheel's
//! `libnvshmem_host.so.3` at run time and reads its release and plugins (what `ferrocomm doctor` shows), and
//! its NVSHMEM errors say what to do. Without the wheel the probe's test says so and passes, unless
//! `FERROCOMM_REQUIRE_NVSHMEM=1` (CI sets it).

use ferrocomm::{Error, nvshmem};

#[test]
fn the_host_library_is_found_and_reports_the_pinned_release() {
    let info = match nvshmem::probe() {
        Ok(info) => info,
        Err(e) => {
            assert!(
                std::env::var("FERROCOMM_REQUIRE_NVSHMEM").as_deref() != Ok("1"),
                "FERROCOMM_REQUIRE_NVSHMEM=1 but: {e}"
            );
            eprintln!("skipped: {e}");
            return;
        }
    };
    assert_eq!(info.version, nvshmem::PINNED_VERSION, "{}", info.library.display());
    assert!(info.library.ends_with(nvshmem::SONAME), "{}", info.library.display());
    // The wheel carries the unique-id bootstrap ferrocomm uses and the transports that reach other nodes.
    assert!(info.bootstraps.iter().any(|b| b == "uid"), "{:?}", info.bootstraps);
    for transport in ["ibgda", "ibrc"] {
        assert!(info.transports.iter().any(|t| t == transport), "{transport} missing: {:?}", info.transports);
    }
    assert!(info.openshmem.0 >= 1, "{:?}", info.openshmem);
    assert!(info.heap_bytes > 0);
}

#[test]
fn nvshmem_errors_name_the_fix() {
    let msg = Error::NvshmemMissing { tried: "libnvshmem_host.so.3 (not found)".into() }.to_string();
    assert!(msg.contains("pip install nvidia-nvshmem-cu13==3.4.5"), "{msg}");
    assert!(msg.contains("FERROCOMM_NVSHMEM_LIB") && msg.contains("LD_LIBRARY_PATH"), "{msg}");

    let msg = Error::NvshmemVersionMismatch {
        module: "k",
        bitcode: "3.8.0".into(),
        host: "3.4.5".into(),
        library: "/opt/nvshmem/lib/libnvshmem_host.so.3".into(),
    }
    .to_string();
    assert!(msg.contains("NVSHMEM 3.8.0") && msg.contains("NVSHMEM 3.4.5") && msg.contains("/opt/nvshmem"), "{msg}");

    let msg = Error::NvshmemHeapTooSmall {
        label: "SymBuffer<f32> of 1 elements".into(),
        bytes: 3 << 30,
        live: 1 << 20,
        heap: 1 << 30,
        heap_from_env: false,
        suggested: "8G".into(),
    }
    .to_string();
    assert!(msg.contains("NVSHMEM_SYMMETRIC_SIZE=8G "), "{msg}");
    assert!(msg.contains("(3 GiB requested, 1 MiB of") && msg.contains("(1 GiB, NVSHMEM's default)"), "{msg}");

    let msg = Error::NvshmemUnreachable { module: "ferrocomm_kernels", rank: 0, peer: 8 }.to_string();
    assert!(msg.contains("`ferrocomm_kernels`") && msg.contains("rank 8") && msg.contains("nvshmem()"), "{msg}");
}

/// `ferrocomm doctor`'s NVSHMEM lines: the release, the transports, the bootstrap and the heap — or, without
/// the library, that kernels then reach this node's GPUs only and how to install it.
#[test]
fn doctor_reports_nvshmem() {
    let render = |found: &Result<nvshmem::NvshmemInfo, String>| {
        let mut out = Vec::new();
        ferrocomm_cli::doctor::render_nvshmem(found, &mut out).unwrap();
        String::from_utf8(out).unwrap()
    };
    let missing = Error::NvshmemMissing { tried: "libnvshmem_host.so.3 (not found)".into() }.to_string();
    let text = render(&Err(missing));
    assert!(text.starts_with("NVSHMEM: not available") && text.contains("pip install nvidia-nvshmem-cu13"), "{text}");
    let Ok(info) = nvshmem::probe() else { return };
    let text = render(&Ok(info));
    for needle in ["NVSHMEM: 3.4.5, OpenSHMEM", "transports: ", "ibgda", "uid: found", "symmetric heap: ", "GiB per PE"]
    {
        assert!(text.contains(needle), "`{needle}` missing from:\n{text}");
    }
}
