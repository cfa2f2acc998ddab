//! Lowering host arguments to the kernel ABI ([`LaunchParam`]) and packing the values the way
//! `cuLaunchKernel` takes them ([`ParamPack`]).

use ferrocomm_device::abi::{RawSlice, RawSym};
use ferrocomm_device::queue::HostQueues;
use ferrocomm_device::{DeviceParam, SignalPad, SymSlice, SymSliceMut, bf16, f16};

use crate::error::Error;
use crate::exec::ParamPack;
use crate::memory::{DeviceCopy, SignalPadBuffer, SymBuffer};
use crate::team::RankRef;

/// A kernel parameter type as the host passes it: what the launcher takes (`Host`) and how it becomes the
/// ABI value of one rank (`lower`). The `#[kernel]` launcher names `<A as LaunchParam>::Host<'a>` for each
/// kernel argument `A`, so the borrow it takes follows from the kernel's own signature.
pub trait LaunchParam: DeviceParam {
    /// What the launcher takes for this parameter.
    type Host<'a>;

    /// This rank's ABI value. Checks that a buffer belongs to the launching team and the rank's device.
    fn lower(host: &Self::Host<'_>, rank: &RankRef<'_>) -> Result<Self::Abi, Error>;
}

macro_rules! scalar_params {
    ($($t:ty),* $(,)?) => { $(
        impl LaunchParam for $t {
            type Host<'a> = $t;

            fn lower(host: &$t, _rank: &RankRef<'_>) -> Result<$t, Error> {
                Ok(*host)
            }
        }
    )* };
}
scalar_params!(u8, u16, u32, u64, usize, i8, i16, i32, i64, isize, f32, f64, bf16, f16);

impl LaunchParam for bool {
    type Host<'a> = bool;

    fn lower(host: &bool, _rank: &RankRef<'_>) -> Result<u8, Error> {
        Ok(u8::from(*host))
    }
}

impl<T: DeviceCopy> LaunchParam for &[T] {
    type Host<'a> = &'a SymBuffer<T>;

    fn lower(host: &&SymBuffer<T>, rank: &RankRef<'_>) -> Result<RawSlice<T>, Error> {
        host.check_for(rank)?;
        host.raw_slice(rank.rank())
    }
}

impl<T: DeviceCopy> LaunchParam for &mut [T] {
    type Host<'a> = &'a mut SymBuffer<T>;

    fn lower(host: &&mut SymBuffer<T>, rank: &RankRef<'_>) -> Result<RawSlice<T>, Error> {
        host.check_for(rank)?;
        host.raw_slice(rank.rank())
    }
}

impl<T: DeviceCopy> LaunchParam for SymSlice<T> {
    type Host<'a> = &'a SymBuffer<T>;

    fn lower(host: &&SymBuffer<T>, rank: &RankRef<'_>) -> Result<RawSym<T>, Error> {
        host.check_for(rank)?;
        host.raw(rank.rank())
    }
}

impl<T: DeviceCopy> LaunchParam for SymSliceMut<T> {
    type Host<'a> = &'a mut SymBuffer<T>;

    fn lower(host: &&mut SymBuffer<T>, rank: &RankRef<'_>) -> Result<RawSym<T>, Error> {
        host.check_for(rank)?;
        host.raw(rank.rank())
    }
}

impl LaunchParam for SignalPad {
    type Host<'a> = &'a SignalPadBuffer;

    fn lower(host: &&SignalPadBuffer, rank: &RankRef<'_>) -> Result<RawSym<u64>, Error> {
        host.check_for(rank)?;
        host.raw(rank.rank())
    }
}

/// Host queues pass as built: their `unsafe` constructor vouched for the memory.
impl LaunchParam for HostQueues {
    type Host<'a> = HostQueues;

    fn lower(host: &HostQueues, _rank: &RankRef<'_>) -> Result<HostQueues, Error> {
        Ok(*host)
    }
}

impl ParamPack {
    /// Lowers `host` for `rank` with `P`'s [`LaunchParam`] and appends the result.
    pub fn push_param<P: LaunchParam>(&mut self, host: &P::Host<'_>, rank: &RankRef<'_>) -> Result<(), Error> {
        self.push(P::lower(host, rank)?);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_aligned_and_read_back() {
        let mut pack = ParamPack::new();
        pack.push(7u8);
        pack.push(0x1122_3344_5566_7788u64);
        pack.push(RawSlice::<f32> { ptr: 0x1000 as *mut f32, len: 3 });
        pack.push(2.5f32);
        let p = pack.pointers();
        assert_eq!(p.len(), 4);
        for (ptr, align) in p.iter().zip([1, 8, 8, 4]) {
            assert_eq!(*ptr as usize % align, 0);
        }
        // SAFETY: each pointer addresses a value of the pushed type.
        unsafe {
            assert_eq!(*p[0].cast::<u8>(), 7);
            assert_eq!(*p[1].cast::<u64>(), 0x1122_3344_5566_7788);
            let s = *p[2].cast::<RawSlice<f32>>();
            assert_eq!((s.ptr as usize, s.len), (0x1000, 3));
            assert_eq!(*p[3].cast::<f32>(), 2.5);
        }
    }

    #[test]
    fn a_clone_has_its_own_storage() {
        let mut a = ParamPack::new();
        a.push(1u32);
        let b = a.clone();
        assert_ne!(a.pointers()[0], b.pointers()[0]);
        // SAFETY: both point at the u32 pushed.
        assert_eq!(unsafe { *b.pointers()[0].cast::<u32>() }, 1);
    }
}
