//! Where a thread is: thread, block and grid indices and sizes, lane and warp, and the SM it runs on.
//!
//! Linear indices count x fastest, then y, then z, as CUDA does; warps are cut from the linear thread
//! index of the block in groups of 32.

#[cfg(target_arch = "nvptx64")]
use core::arch::asm;

/// One special register read: a `mov.u32` from the register on the GPU, the emulated thread's field on the
/// host. The asm string is written out at each use.
macro_rules! special_register {
    ($(#[$doc:meta])* $name:ident, $asm:literal, |$t:ident| $host:expr) => {
        $(#[$doc])*
        #[inline(always)]
        pub fn $name() -> u32 {
            #[cfg(target_arch = "nvptx64")]
            {
                let r: u32;
                // SAFETY: reads a special register; no memory is touched.
                unsafe { asm!($asm, r = out(reg32) r, options(pure, nomem, nostack)) };
                r
            }
            #[cfg(not(target_arch = "nvptx64"))]
            {
                let $t = crate::lower::registers();
                $host
            }
        }
    };
}

special_register!(
    /// `%tid.x`: the thread's x index in its block.
    thread_idx_x, "mov.u32 {r}, %tid.x;", |t| t.thread_idx[0]
);
special_register!(
    /// `%tid.y`: the thread's y index in its block.
    thread_idx_y, "mov.u32 {r}, %tid.y;", |t| t.thread_idx[1]
);
special_register!(
    /// `%tid.z`: the thread's z index in its block.
    thread_idx_z, "mov.u32 {r}, %tid.z;", |t| t.thread_idx[2]
);
special_register!(
    /// `%ctaid.x`: the block's x index in the grid.
    block_idx_x, "mov.u32 {r}, %ctaid.x;", |t| t.block_idx[0]
);
special_register!(
    /// `%ctaid.y`: the block's y index in the grid.
    block_idx_y, "mov.u32 {r}, %ctaid.y;", |t| t.block_idx[1]
);
special_register!(
    /// `%ctaid.z`: the block's z index in the grid.
    block_idx_z, "mov.u32 {r}, %ctaid.z;", |t| t.block_idx[2]
);
special_register!(
    /// `%ntid.x`: threads per block along x.
    block_dim_x, "mov.u32 {r}, %ntid.x;", |t| t.block_dim[0]
);
special_register!(
    /// `%ntid.y`: threads per block along y.
    block_dim_y, "mov.u32 {r}, %ntid.y;", |t| t.block_dim[1]
);
special_register!(
    /// `%ntid.z`: threads per block along z.
    block_dim_z, "mov.u32 {r}, %ntid.z;", |t| t.block_dim[2]
);
special_register!(
    /// `%nctaid.x`: blocks in the grid along x.
    grid_dim_x, "mov.u32 {r}, %nctaid.x;", |t| t.grid_dim[0]
);
special_register!(
    /// `%nctaid.y`: blocks in the grid along y.
    grid_dim_y, "mov.u32 {r}, %nctaid.y;", |t| t.grid_dim[1]
);
special_register!(
    /// `%nctaid.z`: blocks in the grid along z.
    grid_dim_z, "mov.u32 {r}, %nctaid.z;", |t| t.grid_dim[2]
);
special_register!(
    /// `%laneid`: the thread's lane in its warp, `0..32`.
    lane_id, "mov.u32 {r}, %laneid;", |t| t.lane
);
special_register!(
    /// `%smid`: the SM the thread runs on (for diagnostics and spreading work; it may change between reads
    /// only under preemption). The emulator reports the linear block index.
    smid, "mov.u32 {r}, %smid;", |t| t.smid
);

/// An (x, y, z) triple of indices or sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Dim3 {
    /// x, the fastest-varying.
    pub x: u32,
    /// y.
    pub y: u32,
    /// z.
    pub z: u32,
}

/// The thread's index in its block.
#[inline(always)]
pub fn thread_idx() -> Dim3 {
    Dim3 { x: thread_idx_x(), y: thread_idx_y(), z: thread_idx_z() }
}

/// The block's index in the grid.
#[inline(always)]
pub fn block_idx() -> Dim3 {
    Dim3 { x: block_idx_x(), y: block_idx_y(), z: block_idx_z() }
}

/// The block's size in threads.
#[inline(always)]
pub fn block_dim() -> Dim3 {
    Dim3 { x: block_dim_x(), y: block_dim_y(), z: block_dim_z() }
}

/// The grid's size in blocks.
#[inline(always)]
pub fn grid_dim() -> Dim3 {
    Dim3 { x: grid_dim_x(), y: grid_dim_y(), z: grid_dim_z() }
}

/// The thread's linear index in its block, `0..block_size()`.
#[inline(always)]
pub fn thread_rank() -> u32 {
    thread_idx_x() + block_dim_x() * (thread_idx_y() + block_dim_y() * thread_idx_z())
}

/// Threads per block.
#[inline(always)]
pub fn block_size() -> u32 {
    block_dim_x() * block_dim_y() * block_dim_z()
}

/// The block's linear index in the grid, `0..grid_size()`.
#[inline(always)]
pub fn block_rank() -> u32 {
    block_idx_x() + grid_dim_x() * (block_idx_y() + grid_dim_y() * block_idx_z())
}

/// Blocks in the grid.
#[inline(always)]
pub fn grid_size() -> u32 {
    grid_dim_x() * grid_dim_y() * grid_dim_z()
}

/// The thread's linear index in the whole grid.
#[inline(always)]
pub fn global_thread_idx() -> usize {
    block_rank() as usize * block_size() as usize + thread_rank() as usize
}

/// Threads in the whole grid.
#[inline(always)]
pub fn global_threads() -> usize {
    grid_size() as usize * block_size() as usize
}

/// The warp's index in its block (`thread_rank() / 32`; not the hardware's `%warpid`, which is a slot).
#[inline(always)]
pub fn warp_id() -> u32 {
    thread_rank() / 32
}

/// Warps per block (the last may be partial).
#[inline(always)]
pub fn warps_per_block() -> u32 {
    block_size().div_ceil(32)
}

/// Threads in the caller's warp: 32, or fewer in the last warp of a block whose size is not a multiple of 32.
#[inline(always)]
pub fn warp_lanes() -> u32 {
    (block_size() - warp_id() * 32).min(32)
}

/// The member mask naming every thread of the caller's warp (what whole-warp operations pass).
#[inline(always)]
pub fn warp_mask() -> u32 {
    match warp_lanes() {
        32 => u32::MAX,
        n => (1u32 << n) - 1,
    }
}
