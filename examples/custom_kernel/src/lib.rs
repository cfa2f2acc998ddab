//! `custom-kernel`: a kernels crate of one's own, the way an author starts one — a `build.rs` that calls
//! `ferrocomm_builder::build_script()`, kernels written with `#[kernel]` and the device library, and
//! `ferrocomm::kernel_module!()` to embed their PTX. The program that launches them is
//! `examples/custom_kernel.rs` of `ferrocomm-examples` (`cargo run --release --example custom_kernel`).
//!
//! Two kernels make a ring step: [`scaled_put()`] sends `scale * src` of every rank into the next rank's
//! `inbox` and returns once its own inbox is full; [`accumulate()`] adds the inbox into a local sum. The
//! pad's signals make the pair safe to launch back to back and to replay from a CUDA graph:
//!
//! - [`READY`]: a rank tells its predecessor "my inbox is free" at the start of `scaled_put` — every
//!   kernel that read the inbox ran earlier on its stream — and a writer waits for it before storing.
//! - [`DATA`]` + b`: block `b` of the predecessor has stored its share (release); the receiver's block `b`
//!   waits for it (acquire), so the kernel ends only when the whole inbox has landed.
//!
//! Each signal is set to the pad's launch epoch (1, 2, 3, … per launch, kept on the device), so nothing
//! is reset between launches.
#![cfg_attr(target_arch = "nvptx64", no_std)]
#![cfg_attr(target_arch = "nvptx64", feature(abi_ptx))]

use ferrocomm_device::kernel;
use ferrocomm_device::prelude::*;

/// Signal index: the successor's inbox is free for this launch.
pub const READY: usize = 0;
/// First data signal: `DATA + b` is raised by block `b` of the predecessor.
pub const DATA: usize = 1;
/// Most blocks a launch of [`scaled_put()`] may use.
pub const MAX_BLOCKS: usize = 64;
/// Signals the pad of [`scaled_put()`] needs (`SignalPadBuffer::new(&team, name, PAD_SIGNALS)`).
pub const PAD_SIGNALS: usize = DATA + MAX_BLOCKS;

/// Every rank stores `scale * src[i]` into element `i` of the next rank's `inbox`, then waits until the
/// previous rank's values have landed in its own `inbox`. The grid must be the same on every rank (a team
/// launch makes it so) and have at most [`MAX_BLOCKS`] blocks.
#[kernel(len(inbox) >= len(src))]
pub fn scaled_put(src: &[f32], inbox: SymSliceMut<f32>, pad: SignalPad, scale: f32) {
    let (rank, world) = (team::rank(), team::world());
    let next = (rank + 1) % world;
    let prev = (rank + world - 1) % world;
    let block = block_rank() as usize;
    assert!(DATA + grid_size() as usize <= pad.len(), "scaled_put: more blocks than the pad has data signals");
    let session = pad.session(); // the launch's epoch, advanced when the session ends
    let epoch = session.epoch();

    // Our inbox is free (stream order: whatever read it has finished); let the predecessor write.
    if global_thread_idx() == 0 {
        pad.peer(prev, READY).set_release(epoch);
    }
    // Wait until the successor's inbox is free, then let the whole block go.
    if thread_rank() == 0 {
        pad.local(READY).wait_ge(epoch);
    }
    sync_threads();

    // Grid-stride loop: element `i` is stored by one thread only.
    let to = inbox.peer(next);
    let mut i = global_thread_idx();
    while i < src.len() {
        // SAFETY: in bounds (`len(inbox) >= len(src)`); no other thread writes element `i` of the successor's
        // inbox in this launch, and the successor reads it only after acquiring this block's data signal.
        unsafe { to.write(i, src[i] * scale) };
        i += global_threads();
    }

    // The barrier makes every store of the block precede thread 0's release, which publishes them all.
    sync_threads();
    if thread_rank() == 0 {
        pad.peer(next, DATA + block).set_release(epoch);
        // The predecessor's block `block` wrote its share of our inbox: acquire it.
        pad.local(DATA + block).wait_ge(epoch);
    }
}

/// `acc[i] += inbox[i]` on every rank: consumes what [`scaled_put()`] delivered. Purely local, so it never
/// waits (`no_wait`: any grid will do).
#[kernel(len(acc) <= len(inbox), no_wait)]
pub fn accumulate(acc: &mut [f32], inbox: SymSlice<f32>) {
    let received = inbox.local();
    let mut i = global_thread_idx();
    while i < acc.len() {
        acc[i] += received[i];
        i += global_threads();
    }
}

/// CPU references of the kernels, for checking them.
#[cfg(not(target_arch = "nvptx64"))]
pub mod reference {
    /// Every rank's inbox after [`scaled_put()`](fn@super::scaled_put): rank `r` holds `scale * srcs[r - 1]`
    /// (ring order), as `f32` products exactly as the kernel computes them.
    pub fn scaled_put(srcs: &[Vec<f32>], scale: f32) -> Vec<Vec<f32>> {
        let world = srcs.len();
        (0..world).map(|r| srcs[(r + world - 1) % world].iter().map(|&x| x * scale).collect()).collect()
    }

    /// `acc` after adding `received` `times` times, one `f32` addition after another.
    pub fn accumulate(acc: &[f32], received: &[f32], times: usize) -> Vec<f32> {
        acc.iter().zip(received).map(|(&a, &x)| (0..times).fold(a, |sum, _| sum + x)).collect()
    }
}

#[cfg(not(target_arch = "nvptx64"))]
ferrocomm::kernel_module!();
