//! The ordinary modules (sm_90) and the NVSHMEM flavour (sm_80 and sm_90: NVSHMEM 3.4's bitcode supports
//! both), no traced flavour: the crate's kernels exist to run through NVSHMEM (the ordinary build serves
//! the emulator and teams whose peers loads and stores reach), and every nested build costs a compile of
//! `core`.
use ferrocomm_builder::Arch;

fn main() {
    ferrocomm_builder::build_script_with(|b| {
        b.arch(Arch::SM_90).no_trace().nvshmem_arch(Arch::SM_80).nvshmem_arch(Arch::SM_90)
    });
}
