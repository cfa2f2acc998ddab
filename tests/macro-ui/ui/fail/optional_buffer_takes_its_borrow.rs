// Proves that an optional buffer's launch argument takes the borrow its kernel argument asks for:
// `Option<&mut [T]>` takes `Some(&mut buffer)`, and a shared borrow does not compile.
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
    maybe_fill::launch(&team, LaunchConfig::single(), Some(&out))?.wait()?;
    Ok(())
}
