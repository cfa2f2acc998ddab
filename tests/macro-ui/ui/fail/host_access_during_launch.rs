// Proves that while the launch guard lives, the host can neither read nor write a buffer the kernel
// writes, nor write one it reads.
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
    let mut src = SymBuffer::<f32>::new(&team, 4)?;
    let guard = scale::launch(&team, LaunchConfig::single(), &mut dst, &src, 2.0)?;
    let early = dst.to_host(0)?; // reads what the kernel is writing
    src.fill(1.0)?; // writes what the kernel is reading
    guard.wait()?;
    println!("{early:?}");
    Ok(())
}
