//! `#[kernel]`'s compile-time checks, each proved by a case that must fail to compile with its message at
//! its span (`ui/fail/*.rs` next to the expected `.stderr`), and kernels that must compile and run on the
//! CPU emulator (`ui/pass/*.rs`). The cases build as host code against the workspace crates; their kernels
//! name a `KernelModule` they declare themselves (see `ui/README.md`).
//!
//! Regenerate the expected output after an intended change with `TRYBUILD=overwrite cargo test -p
//! ferrocomm-macro-ui --test macro_ui`, then read every `.stderr` that changed.

#[test]
fn kernel_macro_ui() {
    if std::env::var_os("FERROCOMM_ON_DEVICE").is_some() {
        eprintln!("skipped: the trybuild cases need cargo, and FERROCOMM_ON_DEVICE=1 says this machine has none");
        return;
    }
    let t = trybuild::TestCases::new();
    t.pass("ui/pass/*.rs");
    t.compile_fail("ui/fail/*.rs");
}
