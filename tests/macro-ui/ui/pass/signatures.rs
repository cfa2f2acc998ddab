// The signature forms a kernel may take, each launched once on a one-rank emulated team.
#![deny(warnings)]
use ferrocomm::{Error, KernelModule, LaunchConfig, SymBuffer, Team};
use ferrocomm_device::kernel;
use ferrocomm_device::prelude::*;

static __FERROCOMM_MODULE: KernelModule = KernelModule::new("ui", &[]);
static OTHER_MODULE: KernelModule = KernelModule::new("other", &[]);

/// Argument names the launcher uses for itself do not clash with its own.
#[kernel(no_wait)]
pub fn names(team: u32, cfg: u32, rank: &mut [u32], pack: u32, params: u32, abi0: u32) {
    if global_thread_idx() == 0 {
        rank[0] = team + cfg + pack + params + abi0;
    }
}

/// `mut` arguments, `'_`, an explicit unit return, other attributes.
#[kernel(no_wait)]
#[allow(clippy::needless_return, clippy::unused_unit)]
pub fn forms(mut n: u32, out: &'_ mut [u32]) -> () {
    n += 1;
    if global_thread_idx() == 0 {
        out[0] = n;
    }
    return;
}

/// An `unsafe` kernel has an `unsafe` launcher.
///
/// # Safety
///
/// `i < out.len()`.
#[kernel(no_wait)]
pub unsafe fn unchecked(out: &mut [u32], i: usize) {
    // SAFETY: the kernel's contract.
    unsafe { *out.get_unchecked_mut(i) = 9 }
}

/// A kernel whose PTX lives in another module static.
#[kernel(no_wait, module = OTHER_MODULE)]
pub fn elsewhere(out: &mut [u32]) {
    out[0] = 42;
}

/// A `cfg` on the kernel removes every generated item with it (a launcher left behind would not compile).
#[kernel]
#[cfg(any())]
pub fn compiled_out(n: u32) {}

pub mod outer {
    pub type Count = u32;

    pub mod inner {
        use ferrocomm_device::kernel;

        pub type Elem = u32;

        /// `self::` and `super::` paths mean the same in the launcher as in the kernel.
        #[kernel(no_wait, module = super::super::OTHER_MODULE)]
        pub fn paths(out: &mut [self::Elem], n: super::Count) {
            out[0] = n;
        }
    }
}

fn main() -> Result<(), Error> {
    let team = Team::emulated(1)?;
    let one = LaunchConfig::single();
    let mut out = SymBuffer::<u32>::new(&team, 2)?;

    names::launch(&team, one, 1, 2, &mut out, 3, 4, 5)?.wait()?;
    assert_eq!(out.to_host(0)?[0], 15);
    forms::launch(&team, one, 6, &mut out)?.wait()?;
    assert_eq!(out.to_host(0)?[0], 7);
    // SAFETY: 1 < 2.
    unsafe { unchecked::launch(&team, one, &mut out, 1) }?.wait()?;
    assert_eq!(out.to_host(0)?[1], 9);
    assert_eq!(elsewhere::KERNEL.module.name(), "other");
    elsewhere::launch(&team, one, &mut out)?.wait()?;
    assert_eq!(out.to_host(0)?[0], 42);
    assert_eq!(outer::inner::paths::KERNEL.name, "paths");
    outer::inner::paths::launch(&team, one, &mut out, 8)?.wait()?;
    assert_eq!(out.to_host(0)?[0], 8);
    assert!(names::KERNEL.name == "names" && !names::KERNEL.waits);
    Ok(())
}
