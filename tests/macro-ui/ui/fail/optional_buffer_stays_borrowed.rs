// Proves that an optional buffer stays borrowed until the launch guard is gone, as a plain buffer does:
// the host cannot touch it while the kernel may still write it.
use ferrocomm::{Error, KernelModule, LaunchConfig, SymBuffer, Team};
use ferrocomm_device::kernel;

static __FERROCOMM_MODULE: KernelModule = KernelModule::new("ui", &[]);

#[kernel(no_wait)]
pub fn maybe_fill(out: Option<&mut [u32]>) {
    if let Some(out) = out {
        out[0] = 1;
    }
}

fn main() -> Result<(), Error> {
    let team = Team::emulated(1)?;
    let mut out = SymBuffer::<u32>::new(&team, 4)?;
    let guard = maybe_fill::launch(&team, LaunchConfig::single(), Some(&mut out))?;
    out.fill(0)?; // the launch may still be writing `out`
    guard.wait()?;
    Ok(())
}
