// Proves that the launcher's parameters mirror the kernel's: a wrong count or a wrong type does not compile.
use ferrocomm::{Error, KernelModule, LaunchConfig, SymBuffer, Team};
use ferrocomm_device::kernel;

static __FERROCOMM_MODULE: KernelModule = KernelModule::new("ui", &[]);

#[kernel(no_wait)]
pub fn scale(dst: &mut [f32], src: &[f32], by: f32) {
    dst[0] = src[0] * by;
}

fn main() -> Result<(), Error> {
    let team = Team::emulated(1)?;
    let cfg = LaunchConfig::single();
    let mut dst = SymBuffer::<f32>::new(&team, 4)?;
    let src = SymBuffer::<f32>::new(&team, 4)?;
    let ints = SymBuffer::<u32>::new(&team, 4)?;
    // One argument missing.
    scale::launch(&team, cfg, &mut dst, &src)?.wait()?;
    // The buffer the kernel writes, lent shared.
    scale::launch(&team, cfg, &dst, &src, 2.0)?.wait()?;
    // Elements of the wrong type.
    scale::launch(&team, cfg, &mut dst, &ints, 2.0)?.wait()?;
    // A scalar of the wrong type.
    scale::launch(&team, cfg, &mut dst, &src, 2u32)?.wait()?;
    Ok(())
}
