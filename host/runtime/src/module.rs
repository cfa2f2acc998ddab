//! The code a kernels crate embeds ([`KernelModule`], [`kernel_module!`](crate::kernel_module)) and the
//! choice of which image a device loads: SASS ptxas assembled at build time when it runs on the device, else
//! PTX, which the driver JIT-compiles. Loading itself (once per rank, cached) is in the CUDA backend
//! (`cuda/module.rs`).

use crate::error::Error;

/// The code of one kernels crate, embedded at build time by `ferrocomm_builder::build_script` and declared
/// with [`kernel_module!`](crate::kernel_module): PTX per architecture, and the SASS (cubins) ptxas
/// assembled from it when the build found ptxas.
#[derive(Debug)]
pub struct KernelModule {
    name: &'static str,
    ptx: &'static [(u32, &'static str)],
    sass: &'static [(u32, &'static [u8])],
    /// The traced flavour (`--cfg ferrocomm_trace`): PTX only, usually for one architecture.
    traced: &'static [(u32, &'static str)],
    /// The NVSHMEM flavour (`--cfg ferrocomm_nvshmem`, linked with NVSHMEM's device bitcode): PTX only.
    nvshmem: &'static [(u32, &'static str)],
}

/// What a device loads of a [`KernelModule`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModuleImage {
    /// SASS for compute capability `cc`: the device runs it as is, nothing to compile.
    Sass {
        /// The compute capability it was assembled for.
        cc: u32,
        /// The cubin.
        cubin: &'static [u8],
    },
    /// PTX for compute capability `cc`, which the driver JIT-compiles for the device at load (seconds for
    /// a large module, unless the driver's JIT cache holds it).
    Ptx {
        /// The compute capability it was compiled for.
        cc: u32,
        /// The PTX.
        ptx: &'static str,
    },
}

impl ModuleImage {
    /// The compute capability the image was built for.
    pub fn cc(&self) -> u32 {
        match *self {
            ModuleImage::Sass { cc, .. } | ModuleImage::Ptx { cc, .. } => cc,
        }
    }

    /// Whether loading it JIT-compiles PTX.
    pub fn is_jit(&self) -> bool {
        matches!(self, ModuleImage::Ptx { .. })
    }
}

impl KernelModule {
    /// A module named `name` (the kernels crate) with `(compute capability, PTX)` pairs and no SASS.
    pub const fn new(name: &'static str, ptx: &'static [(u32, &'static str)]) -> KernelModule {
        KernelModule { name, ptx, sass: &[], traced: &[], nvshmem: &[] }
    }

    /// A module with `(compute capability, PTX)` pairs and the `(compute capability, cubin)` pairs ptxas
    /// assembled from them.
    pub const fn with_sass(
        name: &'static str,
        ptx: &'static [(u32, &'static str)],
        sass: &'static [(u32, &'static [u8])],
    ) -> KernelModule {
        KernelModule { name, ptx, sass, traced: &[], nvshmem: &[] }
    }

    /// This module with the traced flavour's `(compute capability, PTX)` pairs: what a team with tracing on
    /// loads ([`KernelModule::traced_for`]).
    pub const fn with_traced(mut self, traced: &'static [(u32, &'static str)]) -> KernelModule {
        self.traced = traced;
        self
    }

    /// The traced flavour's image for a device of compute capability `cc`: its PTX for the newest
    /// architecture not newer than the device (JIT-compiled at load; the flavour has no SASS).
    pub fn traced_for(&self, cc: u32) -> Result<ModuleImage, Error> {
        let found = self.traced.iter().filter(|(arch, _)| *arch <= cc).max_by_key(|(arch, _)| *arch);
        match found {
            Some(&(cc, ptx)) => Ok(ModuleImage::Ptx { cc, ptx }),
            None => Err(Error::NoTracedPtx {
                module: self.name,
                device_cc: cc,
                available: self.traced.iter().map(|p| p.0).collect(),
            }),
        }
    }

    /// This module with the NVSHMEM flavour's `(compute capability, PTX)` pairs: what a team initialised
    /// with NVSHMEM loads ([`KernelModule::nvshmem_for`]).
    pub const fn with_nvshmem(mut self, nvshmem: &'static [(u32, &'static str)]) -> KernelModule {
        self.nvshmem = nvshmem;
        self
    }

    /// The NVSHMEM flavour's PTX for a device of compute capability `cc` (the newest architecture not newer
    /// than the device, JIT-compiled at load), or `None` when the crate was built without it.
    pub fn nvshmem_for(&self, cc: u32) -> Option<ModuleImage> {
        let found = self.nvshmem.iter().filter(|(arch, _)| *arch <= cc).max_by_key(|(arch, _)| *arch);
        found.map(|&(cc, ptx)| ModuleImage::Ptx { cc, ptx })
    }

    /// What rank `rank` of a team loads on a device of compute capability `cc`, and whether it is the NVSHMEM
    /// flavour: a traced team the traced flavour; a team with NVSHMEM (`unreachable`: `Some` of the first
    /// peer loads and stores cannot reach, if any) the NVSHMEM flavour where the crate has one, else the
    /// ordinary image only when every peer is reachable; any other team the ordinary image.
    pub(crate) fn image_for_team(
        &self,
        cc: u32,
        traced: bool,
        nvshmem: Option<Option<usize>>,
        rank: usize,
    ) -> Result<(ModuleImage, bool), Error> {
        // The NVSHMEM flavour has no trace hooks: a traced team runs the traced one, which must then reach
        // every peer by loads and stores.
        if let (Some(_), false) = (nvshmem, traced)
            && let Some(image) = self.nvshmem_for(cc)
        {
            return Ok((image, true));
        }
        if let Some(Some(peer)) = nvshmem {
            return Err(Error::NvshmemUnreachable { module: self.name, rank, peer });
        }
        let image = if traced { self.traced_for(cc)? } else { self.image_for(cc)? };
        Ok((image, false))
    }

    /// The compute capabilities the NVSHMEM flavour was built for (empty: the crate has none).
    pub fn nvshmem_arches(&self) -> Vec<u32> {
        self.nvshmem.iter().map(|t| t.0).collect()
    }

    /// The NVSHMEM flavour's `(compute capability, PTX)` pairs.
    pub fn nvshmem_ptx(&self) -> &'static [(u32, &'static str)] {
        self.nvshmem
    }

    /// The compute capabilities the traced flavour was built for.
    pub fn traced_arches(&self) -> Vec<u32> {
        self.traced.iter().map(|t| t.0).collect()
    }

    /// The compute capabilities the module has SASS for.
    pub fn sass_arches(&self) -> Vec<u32> {
        self.sass.iter().map(|s| s.0).collect()
    }

    /// What a device of compute capability `cc` loads: SASS of the same major version and a minor version
    /// not above the device's (SASS runs only there: sm_80 SASS on sm_86, never on sm_90), the newest such;
    /// else the PTX [`KernelModule::ptx_for`] picks, JIT-compiled.
    pub fn image_for(&self, cc: u32) -> Result<ModuleImage, Error> {
        let sass =
            self.sass.iter().filter(|(arch, _)| arch / 10 == cc / 10 && *arch <= cc).max_by_key(|(arch, _)| *arch);
        if let Some(&(cc, cubin)) = sass {
            return Ok(ModuleImage::Sass { cc, cubin });
        }
        self.ptx_for(cc).map(|(cc, ptx)| ModuleImage::Ptx { cc, ptx })
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
        /// The PTX of this kernels crate, one module per architecture, its SASS where ptxas made it, its
        /// traced flavour and its NVSHMEM flavour, embedded at build time.
        #[doc(hidden)]
        pub static __FERROCOMM_MODULE: ::ferrocomm::KernelModule = ::ferrocomm::KernelModule::with_sass(
            env!("CARGO_CRATE_NAME"),
            include!(concat!(env!("OUT_DIR"), "/ferrocomm_ptx.rs")),
            include!(concat!(env!("OUT_DIR"), "/ferrocomm_sass.rs")),
        )
        .with_traced(include!(concat!(env!("OUT_DIR"), "/ferrocomm_ptx_trace.rs")))
        .with_nvshmem(include!(concat!(env!("OUT_DIR"), "/ferrocomm_ptx_nvshmem.rs")));
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

    static WITH_SASS: KernelModule =
        KernelModule::with_sass("sass", &[(80, "ptx80"), (90, "ptx90")], &[(80, b"sass80"), (90, b"sass90")]);

    #[test]
    fn sass_where_it_runs_else_ptx() {
        assert_eq!(WITH_SASS.image_for(90).unwrap(), ModuleImage::Sass { cc: 90, cubin: b"sass90" });
        // sm_80 SASS runs on every sm_8x; sm_90 SASS nowhere else.
        assert_eq!(WITH_SASS.image_for(86).unwrap(), ModuleImage::Sass { cc: 80, cubin: b"sass80" });
        assert_eq!(WITH_SASS.image_for(100).unwrap(), ModuleImage::Ptx { cc: 90, ptx: "ptx90" });
        assert!(WITH_SASS.image_for(100).unwrap().is_jit() && !WITH_SASS.image_for(90).unwrap().is_jit());
        // Without SASS, PTX everywhere.
        assert_eq!(TWO.image_for(90).unwrap(), ModuleImage::Ptx { cc: 90, ptx: "ptx90" });
        assert_eq!(WITH_SASS.sass_arches(), [80, 90]);
        assert!(matches!(WITH_SASS.image_for(75), Err(Error::NoPtxForArch { .. })));
    }

    static TRACED: KernelModule =
        KernelModule::new("traced", &[(80, "ptx80"), (90, "ptx90")]).with_traced(&[(90, "t90")]);

    #[test]
    fn the_traced_flavour_is_ptx_for_the_newest_arch_the_device_runs() {
        assert_eq!(TRACED.traced_for(90).unwrap(), ModuleImage::Ptx { cc: 90, ptx: "t90" });
        assert_eq!(TRACED.traced_for(100).unwrap(), ModuleImage::Ptx { cc: 90, ptx: "t90" });
        let msg = TRACED.traced_for(80).unwrap_err().to_string();
        assert!(msg.contains("FERROCOMM_TRACE_ARCHES") && msg.contains("sm_80"), "{msg}");
        assert!(TWO.traced_for(90).is_err() && TRACED.traced_arches() == [90]);
    }

    static LINKED: KernelModule =
        KernelModule::new("linked", &[(90, "ptx90")]).with_nvshmem(&[(80, "nv80"), (90, "nv90")]);

    #[test]
    fn a_team_with_nvshmem_runs_the_nvshmem_flavour_or_needs_every_peer_reachable() {
        // No NVSHMEM: the ordinary image, whatever the crate has.
        assert_eq!(
            LINKED.image_for_team(90, false, None, 0).unwrap(),
            (ModuleImage::Ptx { cc: 90, ptx: "ptx90" }, false)
        );
        // NVSHMEM: the flavour for the newest architecture the device runs, reachable peers or not.
        assert_eq!(
            LINKED.image_for_team(86, false, Some(Some(3)), 0).unwrap(),
            (ModuleImage::Ptx { cc: 80, ptx: "nv80" }, true)
        );
        assert!(LINKED.image_for_team(90, false, Some(None), 0).unwrap().1);
        // A crate without the flavour: fine where loads and stores reach every peer, a typed error where not.
        assert_eq!(
            TWO.image_for_team(90, false, Some(None), 0).unwrap(),
            (ModuleImage::Ptx { cc: 90, ptx: "ptx90" }, false)
        );
        let e = TWO.image_for_team(90, false, Some(Some(9)), 1).unwrap_err();
        assert!(matches!(e, Error::NvshmemUnreachable { module: "two", rank: 1, peer: 9 }), "{e}");
        // A traced team runs the traced flavour, which reaches peers by loads and stores only.
        assert_eq!(
            TRACED.image_for_team(90, true, Some(None), 0).unwrap(),
            (ModuleImage::Ptx { cc: 90, ptx: "t90" }, false)
        );
        assert!(LINKED.image_for_team(90, true, Some(Some(1)), 0).is_err());
    }

    #[test]
    fn an_older_device_gets_an_error_naming_the_fix() {
        let e = TWO.ptx_for(75).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("sm_75") && msg.contains("FERROCOMM_PTX_ARCHES") && msg.contains("[80, 90]"), "{msg}");
    }
}
