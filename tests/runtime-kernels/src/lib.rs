//! The kernels the host runtime's tests launch: written once, run as PTX on GPUs and as host code on the
//! emulator. Entries are written by hand (plain `extern "ptx-kernel"` functions and hand-made
//! [`ferrocomm::Kernel`] descriptors with typed launchers), so the runtime is tested on its own terms.
#![cfg_attr(target_arch = "nvptx64", no_std)]
#![cfg_attr(target_arch = "nvptx64", feature(abi_ptx))]

pub mod body;
pub mod faults;

#[cfg(target_arch = "nvptx64")]
mod entries {
    use ferrocomm_device::abi::{RawSlice, RawSym};

    /// See [`crate::body::stamp_rank`].
    #[unsafe(no_mangle)]
    pub unsafe extern "ptx-kernel" fn stamp_rank(dst: RawSlice<u32>) {
        crate::body::stamp_rank(dst)
    }

    /// See [`crate::body::ring`].
    #[unsafe(no_mangle)]
    pub unsafe extern "ptx-kernel" fn ring(data: RawSym<u32>, pad: RawSym<u64>) {
        // SAFETY: the launcher passes a live symmetric buffer and a signal pad of this team.
        unsafe { crate::body::ring(data, pad) }
    }

    /// See [`crate::body::wait_unraised`].
    #[unsafe(no_mangle)]
    pub unsafe extern "ptx-kernel" fn wait_unraised(pad: RawSym<u64>) {
        // SAFETY: as above.
        unsafe { crate::body::wait_unraised(pad) }
    }

    /// See [`crate::body::spin`].
    #[unsafe(no_mangle)]
    pub unsafe extern "ptx-kernel" fn spin(ns: u64) {
        crate::body::spin(ns)
    }

    /// See [`crate::body::out_of_bounds`].
    #[unsafe(no_mangle)]
    pub unsafe extern "ptx-kernel" fn out_of_bounds(dst: RawSlice<u32>) {
        crate::body::out_of_bounds(dst)
    }
}

#[cfg(not(target_arch = "nvptx64"))]
ferrocomm::kernel_module!();

#[cfg(not(target_arch = "nvptx64"))]
pub mod host;
