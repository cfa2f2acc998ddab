//! The "kernels" whose ordering calls are the fixture's sites.

#[path = "../../device/src/lib.rs"]
pub mod device;

use device::Flag;

pub fn publish(flag: &Flag, v: u64) {
    flag.set_release(v);
}

pub fn count(flag: &Flag) {
    flag.add_release(1);
}

pub fn read(flag: &Flag) -> u64 {
    flag.load_acquire()
}

pub fn await_flag(flag: &Flag) -> u64 {
    flag.wait_acquire()
}
