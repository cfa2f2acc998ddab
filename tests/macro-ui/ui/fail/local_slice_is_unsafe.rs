// Proves that a receive buffer's local copy is not readable in safe code: `local_slice` is `unsafe`, its
// contract being that every put into it is complete (the signal covering them was waited on). That the wait
// comes before the read is not something the types can see: an `unsafe` block here compiles either way.
use ferrocomm_device::kernel;
use ferrocomm_device::prelude::*;

static __FERROCOMM_MODULE: ferrocomm::KernelModule = ferrocomm::KernelModule::new("ui", &[]);

#[kernel]
pub fn receive(inbox: SymSliceMut<u32>, pad: SignalPad, out: &mut [u32]) {
    let data = inbox.local_slice(); // no wait yet, and no `unsafe`
    pad.local(0).wait_ge(1);
    out.copy_from_slice(data);
}

fn main() {}
