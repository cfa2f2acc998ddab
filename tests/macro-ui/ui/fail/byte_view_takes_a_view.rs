// Proves that a `bytes(...)` argument takes a byte view, with the borrow its kernel argument asks for: a
// typed buffer itself does not compile, nor does a shared view (`bytes()`) where the kernel writes
// (`bytes_mut()`).
use ferrocomm::{Error, KernelModule, LaunchConfig, SymBuffer, Team};
use ferrocomm_device::kernel;
use ferrocomm_device::prelude::*;

static __FERROCOMM_MODULE: KernelModule = KernelModule::new("ui", &[]);

#[kernel(no_wait, bytes(src, dst))]
pub fn copy_bytes(src: &[u8], dst: SymSliceMut<u8>) {}

fn main() -> Result<(), Error> {
    let team = Team::emulated(1)?;
    let src = SymBuffer::<f32>::new(&team, 4)?;
    let mut dst = SymBuffer::<u32>::new(&team, 4)?;
    copy_bytes::launch(&team, LaunchConfig::single(), &src, dst.bytes_mut())?.wait()?;
    copy_bytes::launch(&team, LaunchConfig::single(), src.bytes(), dst.bytes())?.wait()?;
    Ok(())
}
