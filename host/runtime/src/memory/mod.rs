//! Symmetric memory: the same allocation on every rank, a device-resident table of peer pointers, and
//! signal pads. Sizes and alignment are checked here; freeing waits for the kernels that use a buffer
//! (the launch guards borrow it, and a leaked guard is caught by [`TeamShared::settle`](crate::team)).

mod caller;
mod signal;
mod sym;

pub use caller::CallerMemory;
pub use signal::SignalPadBuffer;
pub(crate) use sym::Allocation;
pub use sym::{SymBuffer, WeakSymBuffer};

use std::mem::size_of;

use ferrocomm_device::abi::ErrorBuffer;

use crate::error::Error;

/// Every allocation starts on this boundary (what `cuMemAlloc` guarantees, and what 16-byte vector
/// accesses and TMA need).
pub const ALIGN: usize = 256;

/// Bytes of a rank's device error buffer, rounded to the allocation granule.
pub(crate) const ERROR_BUFFER_BYTES: usize = size_of::<ErrorBuffer>().next_multiple_of(ALIGN);

/// Element types that can live in device memory and be copied byte for byte between host and GPUs
/// (the device library's trait: plain data, every bit pattern valid).
pub use ferrocomm_device::DeviceCopy;

/// The bytes each rank allocates for `len` elements of `T`: rounded up to [`ALIGN`], at least one granule
/// (so an empty buffer still has a real, aligned address to hand a kernel).
pub fn allocation_bytes<T>(len: usize) -> Result<usize, Error> {
    let elem_bytes = size_of::<T>();
    if std::mem::align_of::<T>() > ALIGN {
        return Err(Error::TeamConfig {
            reason: format!(
                "an element alignment of {} exceeds the {ALIGN}-byte allocation alignment",
                std::mem::align_of::<T>()
            ),
        });
    }
    let overflow = || Error::SizeOverflow { len, elem_bytes };
    let bytes = len.checked_mul(elem_bytes).ok_or_else(overflow)?;
    // Device addresses are 64-bit and allocations must stay far below isize::MAX for pointer offsets.
    if bytes > isize::MAX as usize - ALIGN {
        return Err(overflow());
    }
    Ok(bytes.max(1).next_multiple_of(ALIGN))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_round_to_the_granule() {
        assert_eq!(allocation_bytes::<u32>(0).unwrap(), 256);
        assert_eq!(allocation_bytes::<u32>(64).unwrap(), 256);
        assert_eq!(allocation_bytes::<u32>(65).unwrap(), 512);
        assert_eq!(allocation_bytes::<u8>(1 << 30).unwrap(), 1 << 30);
    }

    #[test]
    fn overflow_is_an_error_not_a_wrap() {
        let e = allocation_bytes::<u64>(usize::MAX / 4).unwrap_err();
        assert!(matches!(e, Error::SizeOverflow { elem_bytes: 8, .. }), "{e}");
        assert!(allocation_bytes::<u8>(isize::MAX as usize).is_err());
    }

    #[test]
    fn the_error_buffer_fits_its_allocation() {
        assert!(ERROR_BUFFER_BYTES >= size_of::<ErrorBuffer>());
        assert_eq!(ERROR_BUFFER_BYTES % ALIGN, 0);
    }
}
