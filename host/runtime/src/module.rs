//! The PTX a kernels crate embeds ([`KernelModule`], [`kernel_module!`](crate::kernel_module)) and the choice
//! of which PTX a device loads. Loading itself (once per rank, cached) is in the CUDA backend (`cuda/module.rs`).

use crate::error::Error;

/// The PTX of one kernels crate, one module per architecture, embedded at build time by
/// `ferrocomm_builder::build_script` and declared with [`kernel_module!`](crate::kernel_module).
#[derive(Debug)]
pub struct KernelModule {
    name: &'static str,
    ptx: &'static [(u32, &'static str)],
}

impl KernelModule {
    /// A module named `name` (the kernels crate) with `(compute capability, PTX)` pairs.
    pub const fn new(name: &'static str, ptx: &'static [(u32, &'static str)]) -> KernelModule {
        KernelModule { name, ptx }
    }

    /// The kernels crate's name.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Every `(compute capability, PTX)` pair.
    pub fn ptx(&self) -> &'static [(u32, &'static str)] {
        self.ptx
    }

    /// The PTX for a device of compute capability `cc` (`90` for sm_90): the newest arch not newer than
    /// the device, which the driver JIT-compiles forward.
    pub fn ptx_for(&self, cc: u32) -> Result<(u32, &'static str), Error> {
        self.ptx.iter().filter(|(arch, _)| *arch <= cc).max_by_key(|(arch, _)| *arch).copied().ok_or_else(|| {
            Error::NoPtxForArch { module: self.name, device_cc: cc, available: self.ptx.iter().map(|p| p.0).collect() }
        })
    }

    /// A key that identifies this module for the per-rank cache (its static's address).
    pub(crate) fn key(&'static self) -> usize {
        self as *const KernelModule as usize
    }
}

/// Declares the kernels crate's embedded PTX as `__FERROCOMM_MODULE`, the static its kernels' launchers
/// refer to. Invoke it once at the root of a kernels crate whose `build.rs` calls
/// `ferrocomm_builder::build_script()`, for the host only:
///
/// ```ignore
/// #[cfg(not(target_arch = "nvptx64"))]
/// ferrocomm::kernel_module!();
/// ```
#[macro_export]
macro_rules! kernel_module {
    () => {
        /// The PTX of this kernels crate, one module per architecture, embedded at build time.
        #[doc(hidden)]
        pub static __FERROCOMM_MODULE: ::ferrocomm::KernelModule = ::ferrocomm::KernelModule::new(
            env!("CARGO_CRATE_NAME"),
            include!(concat!(env!("OUT_DIR"), "/ferrocomm_ptx.rs")),
        );
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    static TWO: KernelModule = KernelModule::new("two", &[(80, "ptx80"), (90, "ptx90")]);

    #[test]
    fn picks_the_newest_arch_the_device_runs() {
        assert_eq!(TWO.ptx_for(90).unwrap(), (90, "ptx90"));
        assert_eq!(TWO.ptx_for(100).unwrap(), (90, "ptx90"));
        assert_eq!(TWO.ptx_for(86).unwrap(), (80, "ptx80"));
    }

    #[test]
    fn an_older_device_gets_an_error_naming_the_fix() {
        let e = TWO.ptx_for(75).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("sm_75") && msg.contains("FERROCOMM_PTX_ARCHES") && msg.contains("[80, 90]"), "{msg}");
    }
}
