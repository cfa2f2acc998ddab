//! The ordinary modules (sm_90) and the NVSHMEM flavour (sm_80 and sm_90: NVSHMEM 3.4's bitcode supports
//! both), no traced flavour: the crate exists to test the NVSHMEM link path, and every nested build costs
//! a compile of `core`.
use ferrocomm_builder::{Arch, PtxBuilder};

fn main() {
    if ferrocomm_builder::is_nested_build() {
        return;
    }
    let dir = std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR for build scripts");
    let built = PtxBuilder::new(dir)
        .arch(Arch::SM_90)
        .no_trace()
        .nvshmem_arch(Arch::SM_80)
        .nvshmem_arch(Arch::SM_90)
        .cargo_directives(true)
        .build();
    if let Err(err) = built {
        eprintln!("error: {err}");
        std::process::exit(1);
    }
}
