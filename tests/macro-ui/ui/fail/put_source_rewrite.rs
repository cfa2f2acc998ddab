// A non-blocking put's token borrows its source until it completes (`quiet()` or its drop): re-writing the send buffer before the
// put completed does not compile.
use ferrocomm_device::kernel;
use ferrocomm_device::prelude::*;

static __FERROCOMM_MODULE: ferrocomm::KernelModule = ferrocomm::KernelModule::new("ui", &[]);

#[kernel]
pub fn send(inbox: SymSliceMut<u32>, outbox: &mut [u32]) {
    let next = (team::rank() + 1) % team::world();
    let token = put_nbi(Group::Thread, inbox.peer(next), outbox);
    outbox[0] = 7; // the put may still be reading `outbox`
    token.quiet();
}

fn main() {}
