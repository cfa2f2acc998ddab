// Proves that a generic kernel's launcher runs only the instances its attribute lists: `Instance` is sealed
// and implemented for those types alone, so launching with another element type does not compile (there is
// no PTX entry for it).
use ferrocomm::{Error, KernelModule, LaunchConfig, SymBuffer, Team};
use ferrocomm_device::kernel;
use ferrocomm_device::prelude::*;

static __FERROCOMM_MODULE: KernelModule = KernelModule::new("ui", &[]);

#[kernel(no_wait, instances(fill_u32<u32>, fill_f32<f32>))]
pub fn fill<T: DeviceCopy + Default>(out: &mut [T]) {}

fn main() -> Result<(), Error> {
    let team = Team::emulated(1)?;
    let mut out = SymBuffer::<u16>::new(&team, 4)?;
    fill::launch(&team, LaunchConfig::single(), &mut out)?.wait()?;
    Ok(())
}
