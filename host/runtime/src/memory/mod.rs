//! Symmetric memory: the same allocation on every rank, a device-resident table of peer pointers, and
//! signal pads. Sizes and alignment are checked here; freeing waits for the kernels that use a buffer
//! (the launch guards borrow it, and a leaked guard is caught by [`TeamShared::settle`](crate::team)).

mod caller;
mod signal;
mod sym;

pub use caller::CallerMemory;
pub use signal::SignalPadBuffer;
pub use sym::{SymBuffer, WeakSymBuffer};

pub use crate::size::{ALIGN, allocation_bytes};

/// Element types that can live in device memory and be copied byte for byte between host and GPUs
/// (the device library's trait: plain data, every bit pattern valid).
pub use ferrocomm_device::DeviceCopy;
