// A generic kernel with an instance list: one PTX entry per instance, each with its own launcher and
// descriptor, and one generic launcher that runs the instance its type argument picks, on a two-rank
// emulated team.
#![deny(warnings)]
use ferrocomm::{Error, KernelModule, LaunchConfig, SymBuffer, Team};
use ferrocomm_device::kernel;
use ferrocomm_device::prelude::*;

static __FERROCOMM_MODULE: KernelModule = KernelModule::new("ui", &[]);

/// What the kernel needs of its element type.
pub trait Scaled: DeviceCopy {
    fn scaled(self, by: u32) -> Self;
}

impl Scaled for u32 {
    fn scaled(self, by: u32) -> u32 {
        self * by
    }
}

impl Scaled for f32 {
    fn scaled(self, by: u32) -> f32 {
        self * by as f32
    }
}

/// `dst[i] = src[i] * by` for either element type.
#[kernel(no_wait, instances(scale_u32<u32>, scale_f32<f32>), requires(len(dst) == len(src)))]
pub fn scale<T: Scaled>(dst: &mut [T], src: &[T], by: u32) {
    let i = global_thread_idx();
    if i < dst.len() {
        dst[i] = src[i].scaled(by);
    }
}

/// Two type parameters: the instances' `Instance` impls are on tuples.
#[kernel(no_wait, instances(widen_u8_u32<u8, u32>))]
pub fn widen<A: DeviceCopy + Into<B>, B: DeviceCopy>(dst: &mut [B], src: &[A]) {
    let i = global_thread_idx();
    if i < dst.len() && i < src.len() {
        dst[i] = src[i].into();
    }
}

/// The generic launcher works from generic host code, with the kernel's bound and `Instance`.
fn scale_any<T: Scaled + scale::Instance>(team: &Team, dst: &mut SymBuffer<T>, src: &SymBuffer<T>) -> Result<(), Error> {
    scale::launch::<T>(team, LaunchConfig::new(1, 8), dst, src, 3)?.wait()
}

fn main() -> Result<(), Error> {
    let team = Team::emulated(2)?;
    let ints = SymBuffer::from_host(&team, &[1u32, 2, 3])?;
    let mut int_out = SymBuffer::<u32>::new(&team, 3)?;
    scale_any(&team, &mut int_out, &ints)?;
    let floats = SymBuffer::from_host(&team, &[0.5f32, 1.5])?;
    let mut float_out = SymBuffer::<f32>::new(&team, 2)?;
    scale_any(&team, &mut float_out, &floats)?;
    for rank in 0..2 {
        assert_eq!(int_out.to_host(rank)?, [3, 6, 9]);
        assert_eq!(float_out.to_host(rank)?, [1.5, 4.5]);
    }

    // Each instance is a kernel of its own, under its own PTX entry name.
    assert_eq!((scale_u32::KERNEL.name, scale_f32::KERNEL.name), ("scale_u32", "scale_f32"));
    assert!(std::ptr::eq(scale::kernel::<f32>(), &scale_f32::KERNEL));
    scale_u32::launch(&team, LaunchConfig::new(1, 8), &mut int_out, &ints, 2)?.wait()?;
    assert_eq!(int_out.to_host(1)?, [2, 4, 6]);

    // Relations are checked by the generic launcher too, naming the instance.
    let short = SymBuffer::<f32>::new(&team, 1)?;
    match scale::launch(&team, LaunchConfig::single(), &mut float_out, &short, 1) {
        Err(Error::Requirement { kernel, argument, relation, .. }) => {
            assert_eq!((kernel, argument, relation), ("scale_f32", "dst", "len(dst) == len(src)"));
        }
        other => panic!("expected a requirement error, got {:?}", other.map(|_| ())),
    }

    let bytes = SymBuffer::from_host(&team, &[7u8, 8])?;
    let mut wide = SymBuffer::<u32>::new(&team, 2)?;
    widen::launch(&team, LaunchConfig::new(1, 2), &mut wide, &bytes)?.wait()?;
    assert_eq!(wide.to_host(0)?, [7, 8]);
    assert_eq!(widen::kernel::<u8, u32>().name, "widen_u8_u32");
    Ok(())
}
