//! What a launch carries across the seam: the kernel, its grid, and each rank's arguments.

use std::ffi::c_void;
use std::fmt;
use std::mem::{align_of, size_of};

use crate::error::Error;
use crate::module::KernelModule;

/// Grid, block and dynamic shared memory of a launch (the same on every rank).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LaunchConfig {
    /// Blocks per rank, x y z.
    pub grid: [u32; 3],
    /// Threads per block, x y z.
    pub block: [u32; 3],
    /// Dynamic shared memory per block, in bytes.
    pub shared_bytes: u32,
}

impl LaunchConfig {
    /// A one-dimensional launch of `blocks` blocks of `threads` threads.
    pub const fn new(blocks: u32, threads: u32) -> LaunchConfig {
        LaunchConfig { grid: [blocks, 1, 1], block: [threads, 1, 1], shared_bytes: 0 }
    }

    /// A launch with three-dimensional grid and block.
    pub const fn dims(grid: [u32; 3], block: [u32; 3]) -> LaunchConfig {
        LaunchConfig { grid, block, shared_bytes: 0 }
    }

    /// One block of one thread.
    pub const fn single() -> LaunchConfig {
        LaunchConfig::new(1, 1)
    }

    /// Enough blocks of `threads` threads to give each of `n` elements a thread (at least one block).
    pub fn for_elements(n: usize, threads: u32) -> LaunchConfig {
        let threads = threads.max(1);
        let blocks = n.div_ceil(threads as usize).clamp(1, i32::MAX as usize) as u32;
        LaunchConfig::new(blocks, threads)
    }

    /// The same launch with `bytes` of dynamic shared memory per block.
    pub const fn with_shared_bytes(mut self, bytes: u32) -> LaunchConfig {
        self.shared_bytes = bytes;
        self
    }

    /// Blocks in the grid.
    pub fn blocks(&self) -> u64 {
        self.grid.iter().map(|&d| u64::from(d)).product()
    }

    /// Threads in a block.
    pub fn threads_per_block(&self) -> u32 {
        self.block.iter().map(|&d| u64::from(d)).product::<u64>().min(u64::from(u32::MAX)) as u32
    }

    /// Checks what no GPU accepts (device limits are checked again at launch).
    pub fn validate(&self, kernel: &'static str) -> Result<(), Error> {
        let bad = |reason: String| Err(Error::BadLaunchConfig { kernel, reason });
        if self.grid.contains(&0) || self.block.contains(&0) {
            return bad(format!(
                "grid {:?} / block {:?} has a zero dimension; every dimension must be at least 1",
                self.grid, self.block
            ));
        }
        let threads = self.block.iter().map(|&d| u64::from(d)).product::<u64>();
        if threads > 1024 {
            return bad(format!("block {:?} has {threads} threads; a block holds at most 1024", self.block));
        }
        if self.block[2] > 64 {
            return bad(format!("block z = {} exceeds 64", self.block[2]));
        }
        if self.grid[0] > i32::MAX as u32 || self.grid[1] > 65535 || self.grid[2] > 65535 {
            return bad(format!("grid {:?} exceeds 2^31-1 x 65535 x 65535", self.grid));
        }
        Ok(())
    }
}

/// A kernel as its launcher describes it: where its PTX is, its entry name, its host body for the emulator,
/// and whether it waits on other blocks or ranks (then its grid must be co-resident).
#[derive(Debug)]
pub struct Kernel {
    /// The kernels crate's embedded PTX.
    pub module: &'static KernelModule,
    /// The PTX entry name.
    pub name: &'static str,
    /// The emulator body: reads each parameter from the pointer array (exactly what `cuLaunchKernel` gets)
    /// and runs the kernel as the current emulated thread.
    ///
    /// Safety contract of the pointer: the array holds one pointer per kernel parameter, in order, each to a
    /// value of that parameter's ABI type.
    pub emulate: unsafe fn(&[*const c_void]),
    /// Whether the kernel waits on other blocks or ranks.
    pub waits: bool,
    /// Whether the entry first waits for the previous kernel of the stream (`griddepcontrol.wait`, as
    /// every `#[kernel]` entry does), so it may be launched with programmatic dependent launch on sm_90.
    pub grid_dependency: bool,
    /// The most threads per block its PTX allows (`#[kernel(launch_bounds(..))]`: `.maxntid`); a launch
    /// with more is refused before it reaches the GPU or the emulator.
    pub max_threads_per_block: Option<u32>,
}

/// Largest alignment a parameter may need (a `.param .align 16` array).
const SLOT_ALIGN: usize = 16;

#[repr(C, align(16))]
#[derive(Clone, Copy)]
struct Slot([u8; SLOT_ALIGN]);

/// One rank's kernel arguments: each ABI value in aligned storage, and the array of pointers to them that
/// `cuLaunchKernel` (and the emulator's `Kernel::emulate`) takes.
#[derive(Clone, Default)]
pub struct ParamPack {
    storage: Vec<Slot>,
    /// Byte offset of each value in `storage`.
    offsets: Vec<usize>,
    used: usize,
}

// SAFETY: the pack holds plain `Copy` values (numbers and device addresses); it never dereferences them.
unsafe impl Send for ParamPack {}
// SAFETY: as above; shared access only reads.
unsafe impl Sync for ParamPack {}

impl ParamPack {
    /// An empty pack.
    pub fn new() -> ParamPack {
        ParamPack::default()
    }

    /// Appends the next argument's ABI value.
    pub fn push<A: Copy>(&mut self, value: A) {
        const { assert!(align_of::<A>() <= SLOT_ALIGN, "a kernel parameter may be aligned to at most 16 bytes") };
        let offset = self.used.next_multiple_of(align_of::<A>());
        let end = offset + size_of::<A>();
        self.storage.resize(end.div_ceil(SLOT_ALIGN), Slot([0; SLOT_ALIGN]));
        // SAFETY: `storage` is 16-byte aligned and holds at least `end` bytes; `offset` is a multiple of
        // `A`'s alignment, so the write is in bounds and aligned.
        unsafe { self.storage.as_mut_ptr().cast::<u8>().add(offset).cast::<A>().write(value) };
        self.offsets.push(offset);
        self.used = end;
    }

    /// Number of arguments.
    pub fn len(&self) -> usize {
        self.offsets.len()
    }

    /// Whether there are no arguments.
    pub fn is_empty(&self) -> bool {
        self.offsets.is_empty()
    }

    /// One pointer per argument, into this pack (valid while it is neither moved from nor changed).
    pub fn pointers(&self) -> Vec<*mut c_void> {
        let base = self.storage.as_ptr().cast::<u8>();
        // SAFETY: every offset lies within `storage`.
        self.offsets.iter().map(|&o| unsafe { base.add(o) }.cast_mut().cast::<c_void>()).collect()
    }
}

impl fmt::Debug for ParamPack {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ParamPack").field("args", &self.offsets.len()).field("bytes", &self.used).finish()
    }
}
