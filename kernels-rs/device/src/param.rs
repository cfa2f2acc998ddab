//! Kernel parameters: how each type a kernel may take crosses the launch boundary. `#[kernel]` gives the PTX
//! entry one parameter of type `<T as DeviceParam>::Abi` per kernel argument and converts it back with
//! `from_abi`; the host runtime lowers its buffers and handles to the same `Abi` types.

use crate::abi::{RawSlice, RawSym};
use crate::half::{bf16, f16};
use crate::signal::SignalPad;
use crate::sym::{DeviceCopy, SymSlice, SymSliceMut};

/// A type a kernel may take as an argument.
///
/// # Safety
///
/// `Abi` is `#[repr(C)]`-compatible plain data that the host can build, and `from_abi` of a value the host
/// runtime built for this launch yields a valid `Self`.
pub unsafe trait DeviceParam: Sized {
    /// What the PTX entry receives.
    type Abi: Copy + Send + Sync + 'static;

    /// The kernel's argument from what the entry received.
    ///
    /// # Safety
    ///
    /// `abi` was built by the host runtime for this launch (live memory of the right type and length, on
    /// this rank's device).
    unsafe fn from_abi(abi: Self::Abi) -> Self;
}

macro_rules! by_value {
    ($($t:ty),*) => { $(
        // SAFETY: plain values, passed as themselves.
        unsafe impl DeviceParam for $t {
            type Abi = $t;
            #[inline(always)]
            unsafe fn from_abi(abi: $t) -> $t {
                abi
            }
        }
    )* };
}
by_value!(u8, u16, u32, u64, usize, i8, i16, i32, i64, isize, f32, f64, bf16, f16);

// SAFETY: a `bool` travels as a byte; any non-zero byte is `true`.
unsafe impl DeviceParam for bool {
    type Abi = u8;
    #[inline(always)]
    unsafe fn from_abi(abi: u8) -> bool {
        abi != 0
    }
}

// SAFETY: the host passes a pointer to `len` live elements of this device (or null with `len == 0`).
unsafe impl<'a, T: DeviceCopy> DeviceParam for &'a [T] {
    type Abi = RawSlice<T>;
    #[inline(always)]
    unsafe fn from_abi(abi: RawSlice<T>) -> &'a [T] {
        if abi.len == 0 {
            return &[];
        }
        // SAFETY: `from_abi`'s contract.
        unsafe { core::slice::from_raw_parts(abi.ptr, abi.len) }
    }
}

// SAFETY: as for `&[T]`; the host borrows the buffer mutably for the launch.
unsafe impl<'a, T: DeviceCopy> DeviceParam for &'a mut [T] {
    type Abi = RawSlice<T>;
    #[inline(always)]
    unsafe fn from_abi(abi: RawSlice<T>) -> &'a mut [T] {
        if abi.len == 0 {
            return &mut [];
        }
        // SAFETY: `from_abi`'s contract.
        unsafe { core::slice::from_raw_parts_mut(abi.ptr, abi.len) }
    }
}

// SAFETY: the host passes a symmetric allocation and its peer table.
unsafe impl<T: DeviceCopy> DeviceParam for SymSlice<T> {
    type Abi = RawSym<T>;
    #[inline(always)]
    unsafe fn from_abi(abi: RawSym<T>) -> SymSlice<T> {
        // SAFETY: `from_abi`'s contract is `from_raw`'s.
        unsafe { SymSlice::from_raw(abi) }
    }
}

// SAFETY: as for `SymSlice`.
unsafe impl<T: DeviceCopy> DeviceParam for SymSliceMut<T> {
    type Abi = RawSym<T>;
    #[inline(always)]
    unsafe fn from_abi(abi: RawSym<T>) -> SymSliceMut<T> {
        // SAFETY: `from_abi`'s contract is `from_raw`'s.
        unsafe { SymSliceMut::from_raw(abi) }
    }
}

// SAFETY: the host passes a signal pad's symmetric `u64` allocation, epoch slots included.
unsafe impl DeviceParam for SignalPad {
    type Abi = RawSym<u64>;
    #[inline(always)]
    unsafe fn from_abi(abi: RawSym<u64>) -> SignalPad {
        // SAFETY: `from_abi`'s contract is `from_raw`'s.
        unsafe { SignalPad::from_raw(abi) }
    }
}

// Optional buffers: `None` travels as a null address (length 0); the host gives every real buffer, even an
// empty one, a non-null address, so `Some` arrives as `Some`.

// SAFETY: as for `&[T]`; a null pointer is `None`.
unsafe impl<'a, T: DeviceCopy> DeviceParam for Option<&'a [T]> {
    type Abi = RawSlice<T>;
    #[inline(always)]
    unsafe fn from_abi(abi: RawSlice<T>) -> Option<&'a [T]> {
        // SAFETY: `from_abi`'s contract.
        if abi.ptr.is_null() { None } else { Some(unsafe { <&[T]>::from_abi(abi) }) }
    }
}

// SAFETY: as for `&mut [T]`; a null pointer is `None`.
unsafe impl<'a, T: DeviceCopy> DeviceParam for Option<&'a mut [T]> {
    type Abi = RawSlice<T>;
    #[inline(always)]
    unsafe fn from_abi(abi: RawSlice<T>) -> Option<&'a mut [T]> {
        // SAFETY: `from_abi`'s contract.
        if abi.ptr.is_null() { None } else { Some(unsafe { <&mut [T]>::from_abi(abi) }) }
    }
}

// SAFETY: as for `SymSlice`; a null peer table is `None`.
unsafe impl<T: DeviceCopy> DeviceParam for Option<SymSlice<T>> {
    type Abi = RawSym<T>;
    #[inline(always)]
    unsafe fn from_abi(abi: RawSym<T>) -> Option<SymSlice<T>> {
        // SAFETY: `from_abi`'s contract.
        if abi.peers.is_null() { None } else { Some(unsafe { SymSlice::from_abi(abi) }) }
    }
}

// SAFETY: as for `SymSliceMut`; a null peer table is `None`.
unsafe impl<T: DeviceCopy> DeviceParam for Option<SymSliceMut<T>> {
    type Abi = RawSym<T>;
    #[inline(always)]
    unsafe fn from_abi(abi: RawSym<T>) -> Option<SymSliceMut<T>> {
        // SAFETY: `from_abi`'s contract.
        if abi.peers.is_null() { None } else { Some(unsafe { SymSliceMut::from_abi(abi) }) }
    }
}
