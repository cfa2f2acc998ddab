//! Helpers of `device_emulated.rs`: symmetric buffers as host allocations with a peer table, and
//! concurrent launches of one emulated grid per rank.

use ferrocomm_device::DeviceParam;
use ferrocomm_device::abi::{ErrorBuffer, ErrorRecord, LaunchCtx, RawSlice, RawSym, SIGNAL_PAD_EPOCH_SLOTS};
use ferrocomm_device::emu::{EmuError, TeamLaunch};

/// Long enough that no correct test times out on a loaded CI machine.
pub const TIMEOUT_NS: u64 = 20_000_000_000;

/// A symmetric buffer: one 16-byte aligned allocation per rank, viewed `offset_bytes` in, and the table of
/// every rank's base address.
pub struct Sym<T> {
    _storage: Vec<Vec<u128>>,
    table: Vec<*mut T>,
    len: usize,
}

// SAFETY: the test reads the allocations only while no launch runs.
unsafe impl<T> Sync for Sym<T> {}

impl<T: Copy> Sym<T> {
    pub fn new(world: u32, len: usize, offset_bytes: usize, init: impl Fn(u32, usize) -> T) -> Sym<T> {
        let words = (offset_bytes + len * size_of::<T>()).div_ceil(16) + 1;
        let mut storage = Vec::new();
        let mut table = Vec::new();
        for rank in 0..world {
            let mut words = vec![0u128; words];
            // SAFETY: `offset_bytes + len * size_of::<T>()` bytes fit in the allocation.
            let base = unsafe { words.as_mut_ptr().cast::<u8>().add(offset_bytes).cast::<T>() };
            assert!(base.is_aligned(), "offset {offset_bytes} misaligns the element type");
            for i in 0..len {
                // SAFETY: in bounds.
                unsafe { base.add(i).write(init(rank, i)) };
            }
            storage.push(words);
            table.push(base);
        }
        Sym { _storage: storage, table, len }
    }

    /// What rank `rank`'s kernel receives.
    pub fn raw(&self, rank: u32) -> RawSym<T> {
        RawSym { peers: self.table.as_ptr().cast(), local: self.table[rank as usize], len: self.len }
    }

    /// Rank `rank`'s copy as a plain slice argument.
    pub fn slice(&self, rank: u32) -> RawSlice<T> {
        RawSlice { ptr: self.table[rank as usize], len: self.len }
    }

    pub fn raws(&self, world: u32) -> Vec<RawSym<T>> {
        (0..world).map(|r| self.raw(r)).collect()
    }

    pub fn slices(&self, world: u32) -> Vec<RawSlice<T>> {
        (0..world).map(|r| self.slice(r)).collect()
    }

    /// Rank `rank`'s copy, read after the launches.
    pub fn copy(&self, rank: u32) -> Vec<T> {
        // SAFETY: no launch runs; `len` initialised elements.
        unsafe { std::slice::from_raw_parts(self.table[rank as usize], self.len) }.to_vec()
    }
}

/// A signal pad of `signals` signals per rank, zeroed, with its epoch slots.
pub fn pad(world: u32, signals: usize) -> Sym<u64> {
    Sym::new(world, signals + SIGNAL_PAD_EPOCH_SLOTS, 0, |_, _| 0)
}

/// A kernel argument, converted the way `#[kernel]` converts it.
pub fn arg<T: DeviceParam>(abi: T::Abi) -> T {
    // SAFETY: every ABI value of these tests describes live memory of the launch.
    unsafe { T::from_abi(abi) }
}

/// How one rank's launch ended, and what its error buffer holds.
pub struct Outcome {
    pub result: Result<(), EmuError>,
    pub errors: Box<ErrorBuffer>,
}

impl Outcome {
    pub fn records(&self) -> Vec<ErrorRecord> {
        self.errors.written_records().copied().collect()
    }
}

/// Runs `kernel` on `world` emulated ranks at once (one team launch: each rank's grid on its own thread,
/// concurrently, all watched by the emulator's checker).
pub fn run(
    world: u32,
    grid: [u32; 3],
    block: [u32; 3],
    dyn_shared: usize,
    timeout_ns: u64,
    kernel: &(dyn Fn() + Sync),
) -> Vec<Outcome> {
    let mut buffers: Vec<Box<ErrorBuffer>> = (0..world).map(|_| Box::new(ErrorBuffer::ZEROED)).collect();
    let addrs: Vec<usize> = buffers.iter_mut().map(|b| &mut **b as *mut ErrorBuffer as usize).collect();
    let team = TeamLaunch::new(world, grid, block, dyn_shared);
    let results: Vec<Result<(), EmuError>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..world)
            .map(|rank| {
                let errors = addrs[rank as usize] as *mut ErrorBuffer;
                let ctx = LaunchCtx { rank, world, timeout_ns, errors };
                let team = team.clone();
                s.spawn(move || team.run_rank(ctx, kernel))
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("launch thread")).collect()
    });
    results.into_iter().zip(buffers).map(|(result, errors)| Outcome { result, errors }).collect()
}

/// Runs `kernel` and requires every rank to finish cleanly with no error record.
pub fn run_ok(world: u32, grid: [u32; 3], block: [u32; 3], dyn_shared: usize, kernel: &(dyn Fn() + Sync)) {
    for (rank, o) in run(world, grid, block, dyn_shared, TIMEOUT_NS, kernel).into_iter().enumerate() {
        if let Err(e) = &o.result {
            panic!("rank {rank}: {e}");
        }
        assert_eq!(o.errors.count, 0, "rank {rank} recorded errors: {:?}", o.records());
    }
}

pub use ferrocomm_device::Group;

/// Block shape per group: the warp case has a partial second warp (8 lanes); the block case is 2-D.
pub fn block_for(group: Group) -> [u32; 3] {
    match group {
        Group::Thread => [4, 1, 1],
        Group::Warp => [40, 1, 1],
        Group::Block => [16, 3, 1],
    }
}

/// A value per rank and index, distinct across both.
pub fn word(rank: u32, i: usize) -> u32 {
    (rank << 28) ^ (i as u32).wrapping_mul(2_654_435_761)
}

/// A byte per rank and index.
pub fn byte(rank: u32, i: usize) -> u8 {
    (i as u8).wrapping_mul(31).wrapping_add((rank as u8).wrapping_mul(101)).wrapping_add(1)
}

/// The 1-based line of `device_emulated.rs` that contains `marker` (and is not this lookup).
pub fn source_line(marker: &str) -> u32 {
    let pos = include_str!("../device_emulated.rs")
        .lines()
        .position(|l| l.contains(marker) && !l.contains("source_line("))
        .expect("marker line");
    pos as u32 + 1
}
