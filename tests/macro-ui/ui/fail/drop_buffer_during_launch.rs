// Proves that a buffer a running launch uses cannot be freed before its guard is gone.
use ferrocomm::{Error, KernelModule, LaunchConfig, SymBuffer, Team};
use ferrocomm_device::kernel;

static __FERROCOMM_MODULE: KernelModule = KernelModule::new("ui", &[]);

#[kernel(no_wait)]
pub fn scale(dst: &mut [f32], src: &[f32], by: f32) {
    dst[0] = src[0] * by;
}

fn main() -> Result<(), Error> {
    let team = Team::emulated(1)?;
    let mut dst = SymBuffer::<f32>::new(&team, 4)?;
    let src = SymBuffer::<f32>::new(&team, 4)?;
    let guard = scale::launch(&team, LaunchConfig::single(), &mut dst, &src, 2.0)?;
    drop(src);
    drop(dst);
    guard.wait()
}
