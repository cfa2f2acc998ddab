//! Entries for indices, barriers, warp operations, shared memory and time.
//!
//! # Safety
//!
//! Every entry writes through its `out` pointer: launch them with a valid device pointer.

use ferrocomm_device::prelude::*;
use ferrocomm_device::sync::{launch_dependents, wait_prior_grids};
use ferrocomm_device::{index, shared_array, warp};

/// One entry per special register: `*out = register`.
macro_rules! register_entries {
    ($($entry:ident => $read:path;)*) => { $(
        #[unsafe(no_mangle)]
        pub unsafe extern "ptx-kernel" fn $entry(out: *mut u32) {
            // SAFETY: the launch passes a valid pointer.
            unsafe { *out = $read() };
        }
    )* };
}

register_entries! {
    golden_thread_idx_x => index::thread_idx_x;
    golden_thread_idx_y => index::thread_idx_y;
    golden_thread_idx_z => index::thread_idx_z;
    golden_block_idx_x => index::block_idx_x;
    golden_block_idx_y => index::block_idx_y;
    golden_block_idx_z => index::block_idx_z;
    golden_block_dim_x => index::block_dim_x;
    golden_block_dim_y => index::block_dim_y;
    golden_block_dim_z => index::block_dim_z;
    golden_grid_dim_x => index::grid_dim_x;
    golden_grid_dim_y => index::grid_dim_y;
    golden_grid_dim_z => index::grid_dim_z;
    golden_lane_id => index::lane_id;
    golden_smid => index::smid;
}

#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn golden_sync_threads() {
    sync_threads();
}

#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn golden_grid_dependency() {
    wait_prior_grids();
    launch_dependents();
}

#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn golden_sync_warp(mask: u32) {
    sync_warp(mask);
}

#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn golden_shfl_idx(out: *mut u32, v: u32, lane: u32, mask: u32) {
    // SAFETY: the launch passes a valid pointer.
    unsafe { *out = shfl_idx_sync(mask, v, lane) };
}

#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn golden_shfl_up(out: *mut u32, v: u32, delta: u32, mask: u32) {
    // SAFETY: the launch passes a valid pointer.
    unsafe { *out = shfl_up_sync(mask, v, delta) };
}

#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn golden_shfl_down(out: *mut u32, v: u32, delta: u32, mask: u32) {
    // SAFETY: the launch passes a valid pointer.
    unsafe { *out = shfl_down_sync(mask, v, delta) };
}

#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn golden_shfl_xor(out: *mut u32, v: u32, lane_mask: u32, mask: u32) {
    // SAFETY: the launch passes a valid pointer.
    unsafe { *out = shfl_xor_sync(mask, v, lane_mask) };
}

#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn golden_shfl_xor_u64(out: *mut u64, v: u64, lane_mask: u32, mask: u32) {
    // SAFETY: the launch passes a valid pointer.
    unsafe { *out = warp::shfl_xor_sync(mask, v, lane_mask) };
}

#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn golden_vote_ballot(out: *mut u32, pred: u32, mask: u32) {
    // SAFETY: the launch passes a valid pointer.
    unsafe { *out = vote_ballot_sync(mask, pred != 0) };
}

#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn golden_vote_any(out: *mut u32, pred: u32, mask: u32) {
    // SAFETY: the launch passes a valid pointer.
    unsafe { *out = u32::from(vote_any_sync(mask, pred != 0)) };
}

#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn golden_vote_all(out: *mut u32, pred: u32, mask: u32) {
    // SAFETY: the launch passes a valid pointer.
    unsafe { *out = u32::from(vote_all_sync(mask, pred != 0)) };
}

#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn golden_shared_array(out: *mut u32, i: u32) {
    let tile = shared_array!(GOLDEN_TILE: [u32; 64]);
    // SAFETY: one thread per element in a real launch; the index is checked.
    unsafe { *out = tile.as_ptr().add(i as usize % tile.len()).read_volatile() };
}

#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn golden_dynamic_shared(out: *mut u64) {
    let dyn_shared = dynamic_shared::<u64>();
    // SAFETY: the launch passes a valid pointer.
    unsafe { *out = dyn_shared.as_ptr() as u64 + dyn_shared.len() as u64 };
}

#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn golden_globaltimer(out: *mut u64) {
    // SAFETY: the launch passes a valid pointer.
    unsafe { *out = globaltimer() };
}

#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn golden_nanosleep(ns: u32) {
    nanosleep(ns);
}

#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn golden_team_rank(out: *mut u32) {
    // SAFETY: the launch passes a valid pointer.
    unsafe { *out = team::rank() + team::world() };
}
