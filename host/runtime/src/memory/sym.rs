//! [`SymBuffer`]: one allocation per rank, all the same size, plus each rank's device-resident table of
//! every rank's base address as that rank addresses it.

use std::fmt;
use std::marker::PhantomData;
use std::mem::size_of;
use std::sync::Arc;

use ferrocomm_device::abi::{RawSlice, RawSym};

use super::{DeviceCopy, allocation_bytes};
use crate::error::Error;
use crate::team::{BufferEntry, Device, Part, RankRef, Team, TeamShared};

/// A symmetric buffer: `len` elements of `T` on every rank of a team.
///
/// Kernels see it as `SymSlice<T>` (the local part and every peer's, through the peer table) or, for one
/// rank's part only, as a slice. Host access takes `&mut self` to write and `&self` to read, so a buffer a
/// running kernel writes cannot be touched from the host while its launch guard lives.
///
/// ```
/// # use ferrocomm::{SymBuffer, Team};
/// # fn main() -> Result<(), ferrocomm::Error> {
/// let team = Team::emulated(2)?;
/// let mut buf = SymBuffer::<u32>::new(&team, 4)?;
/// buf.copy_from_host(1, &[1, 2, 3, 4])?;
/// assert_eq!(buf.to_host(1)?, [1, 2, 3, 4]);
/// assert_eq!(buf.to_host(0)?, [0; 4]); // fresh memory is zeroed
/// # Ok(()) }
/// ```
pub struct SymBuffer<T: DeviceCopy> {
    alloc: Arc<Allocation>,
    len: usize,
    _elem: PhantomData<T>,
}

/// The memory of a symmetric buffer: every rank's part and peer table. Shared with the graphs whose
/// captured launches use it, so it is freed only when the buffer and every such graph are gone.
#[derive(Debug)]
pub(crate) struct Allocation {
    /// The allocation's number in its team's buffer registry (error messages name buffers by it).
    id: u64,
    team: Arc<TeamShared>,
    bytes: usize,
    /// Per rank of the team: its part, as this process addresses it.
    parts: Vec<Part>,
    /// Per local rank (in the team's local order): the address of its peer table (`world` pointers).
    tables: Vec<u64>,
    table_bytes: usize,
}

impl Allocation {
    /// The base address of rank `rank`'s part, as this process addresses it.
    fn part(&self, rank: usize) -> Result<u64, Error> {
        self.team.check_rank(rank)?;
        Ok(self.parts[rank].address())
    }

    /// Rank `rank`'s part, which this process must run (to read, write or launch on it).
    fn local_part(&self, rank: usize) -> Result<u64, Error> {
        self.team.slot(rank)?;
        self.part(rank)
    }

    /// The peer table of rank `rank`, which this process runs.
    fn table(&self, rank: usize) -> Result<u64, Error> {
        Ok(self.tables[self.team.slot(rank)?])
    }
}

impl Drop for Allocation {
    fn drop(&mut self) {
        // A leaked launch guard may still be running a kernel on this memory: wait for it first.
        if let Err(e) = self.team.settle("SymBuffer::drop")
            && !matches!(e, Error::Capturing { .. } | Error::Poisoned)
        {
            tracing::error!("before freeing a symmetric buffer: {e}");
        }
        self.team.buffers.lock().unwrap_or_else(|p| p.into_inner()).retain(|b| b.id != self.id);
        for (rank, &part) in self.parts.iter().enumerate() {
            self.team.release(rank, part, self.bytes);
        }
        for (&rank, &addr) in self.team.local.iter().zip(&self.tables) {
            self.team.free(rank, addr, self.table_bytes);
        }
    }
}

impl<T: DeviceCopy> SymBuffer<T> {
    /// Allocates `len` zeroed elements on every rank. `len` may be zero.
    pub fn new(team: &Team, len: usize) -> Result<Self, Error> {
        let shared = &team.shared;
        shared.settle("SymBuffer::new")?;
        let world = shared.world;
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        let bytes = allocation_bytes::<T>(len)?;
        let label = format!("SymBuffer<{}>", short_type_name(std::any::type_name::<T>()));
        let mut alloc = Allocation {
            id: NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            team: Arc::clone(shared),
            bytes,
            parts: shared.alloc_symmetric(bytes, &format!("{label} of {len} elements"))?,
            tables: Vec::with_capacity(shared.local.len()),
            table_bytes: allocation_bytes::<u64>(world)?,
        };
        // On an error below, dropping `alloc` frees what was allocated so far. With peer access enabled, in
        // the emulator's one address space, or with peers' parts mapped into this process, every local rank
        // addresses a part by the address this process has for it, so all tables hold the same values.
        let table: Vec<u8> = alloc.parts.iter().flat_map(|p| p.address().to_ne_bytes()).collect();
        for &rank in &shared.local {
            let addr = alloc.team.alloc(rank, alloc.table_bytes)?;
            alloc.tables.push(addr);
            alloc.team.write(rank, addr, &table)?;
        }
        let entry = BufferEntry {
            id: alloc.id,
            label: format!("{label} #{}", alloc.id),
            elem_bytes: size_of::<T>(),
            ranges: alloc.parts.iter().enumerate().map(|(r, p)| (r, p.address(), len * size_of::<T>())).collect(),
        };
        alloc.team.buffers.lock().unwrap_or_else(|p| p.into_inner()).push(entry);
        Ok(SymBuffer { alloc: Arc::new(alloc), len, _elem: PhantomData })
    }

    /// Names the buffer in error messages (the emulator's checker findings name the buffers they are about:
    /// `element 5 of `inbox` (rank 1's copy)`); unnamed, a buffer is `SymBuffer<u32> #3`.
    #[must_use]
    pub fn named(self, name: impl Into<String>) -> Self {
        let label = format!("`{}`", name.into());
        let mut buffers = self.alloc.team.buffers.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(b) = buffers.iter_mut().find(|b| b.id == self.alloc.id) {
            b.label = label;
        }
        drop(buffers);
        self
    }

    /// Allocates a buffer holding `data` on every rank (of this process, in a team that spans processes).
    pub fn from_host(team: &Team, data: &[T]) -> Result<Self, Error> {
        let mut buf = SymBuffer::new(team, data.len())?;
        for rank in team.local_ranks() {
            buf.copy_from_host(rank, data)?;
        }
        Ok(buf)
    }

    /// Elements per rank.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether each rank's part is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Ranks the buffer spans.
    pub fn world(&self) -> usize {
        self.alloc.team.world
    }

    /// The ranks whose parts this process reads and writes: every rank, unless the team spans processes.
    pub fn local_ranks(&self) -> Vec<usize> {
        self.alloc.team.local.clone()
    }

    /// The id of the team that allocated it.
    pub fn team_id(&self) -> u64 {
        self.alloc.team.id
    }

    /// Where rank `rank`'s part lives.
    pub fn device(&self, rank: usize) -> Result<Device, Error> {
        self.alloc.team.check_rank(rank)?;
        Ok(self.alloc.team.devices[rank])
    }

    /// The address of rank `rank`'s part (as this process addresses it: in a team that spans processes, a
    /// peer's part mapped here).
    pub fn address(&self, rank: usize) -> Result<u64, Error> {
        self.alloc.part(rank)
    }

    /// Writes `data` (exactly [`len`](Self::len) elements) into rank `rank`'s part.
    pub fn copy_from_host(&mut self, rank: usize, data: &[T]) -> Result<(), Error> {
        self.alloc.team.check_rank(rank)?;
        if data.len() != self.len {
            return Err(Error::LengthMismatch {
                relation: "data.len() == buffer.len()",
                left: data.len(),
                right: self.len,
            });
        }
        self.alloc.team.settle("SymBuffer::copy_from_host")?;
        self.alloc.team.write(rank, self.alloc.local_part(rank)?, as_bytes(data))
    }

    /// Reads rank `rank`'s part.
    pub fn to_host(&self, rank: usize) -> Result<Vec<T>, Error> {
        self.alloc.team.check_rank(rank)?;
        self.alloc.team.settle("SymBuffer::to_host")?;
        // SAFETY: `DeviceCopy` promises all-zero bytes are a valid `T`.
        let mut out: Vec<T> = vec![unsafe { std::mem::zeroed() }; self.len];
        // SAFETY: `out` is `len` initialised plain-data elements; any bytes written are a valid `T` (DeviceCopy).
        let bytes = unsafe { std::slice::from_raw_parts_mut(out.as_mut_ptr().cast::<u8>(), size_of::<T>() * self.len) };
        self.alloc.team.read(rank, self.alloc.local_part(rank)?, bytes)?;
        Ok(out)
    }

    /// Sets every element on every rank (of this process, in a team that spans processes) to `value`.
    pub fn fill(&mut self, value: T) -> Result<(), Error> {
        for rank in self.alloc.team.local.clone() {
            self.fill_rank(rank, value)?;
        }
        Ok(())
    }

    /// Sets every element of rank `rank`'s part to `value`.
    pub fn fill_rank(&mut self, rank: usize, value: T) -> Result<(), Error> {
        self.alloc.team.check_rank(rank)?;
        self.alloc.team.settle("SymBuffer::fill")?;
        let pattern = as_bytes(std::slice::from_ref(&value));
        let total = size_of::<T>() * self.len;
        if pattern.iter().all(|&b| b == pattern[0]) || total == 0 {
            let byte = pattern.first().copied().unwrap_or(0);
            return self.alloc.team.memset(rank, self.alloc.local_part(rank)?, byte, total);
        }
        const CHUNK_ELEMS: usize = 1 << 16;
        let chunk = vec![value; self.len.min(CHUNK_ELEMS)];
        let mut done = 0;
        while done < self.len {
            let n = (self.len - done).min(CHUNK_ELEMS);
            let dst = self.alloc.local_part(rank)? + (done * size_of::<T>()) as u64;
            self.alloc.team.write(rank, dst, as_bytes(&chunk[..n]))?;
            done += n;
        }
        Ok(())
    }

    /// Reads back rank `rank`'s device-resident peer table: the base address of every rank's part as
    /// `rank` addresses it.
    pub fn peer_table(&self, rank: usize) -> Result<Vec<u64>, Error> {
        self.alloc.team.check_rank(rank)?;
        self.alloc.team.settle("SymBuffer::peer_table")?;
        let mut bytes = vec![0u8; self.world() * 8];
        self.alloc.team.read(rank, self.alloc.table(rank)?, &mut bytes)?;
        Ok(bytes.chunks_exact(8).map(|c| u64::from_ne_bytes(c.try_into().expect("8 bytes"))).collect())
    }

    /// The kernel ABI of the whole symmetric buffer as rank `rank` sees it.
    pub fn raw(&self, rank: usize) -> Result<RawSym<T>, Error> {
        self.alloc.team.check_rank(rank)?;
        self.alloc.team.pin_if_capturing(&self.alloc);
        Ok(RawSym {
            peers: self.alloc.table(rank)? as usize as *const *mut T,
            local: self.alloc.local_part(rank)? as usize as *mut T,
            len: self.len,
        })
    }

    /// The kernel ABI of rank `rank`'s part alone.
    pub fn raw_slice(&self, rank: usize) -> Result<RawSlice<T>, Error> {
        self.alloc.team.check_rank(rank)?;
        self.alloc.team.pin_if_capturing(&self.alloc);
        Ok(RawSlice { ptr: self.alloc.local_part(rank)? as usize as *mut T, len: self.len })
    }

    /// The core of the team that allocated it.
    pub(crate) fn team_shared(&self) -> &TeamShared {
        &self.alloc.team
    }

    /// The same memory seen as `len` elements of `U` (at most as many bytes as this buffer has): how a
    /// framework's layer keeps a pool of symmetric bytes and hands each call a buffer of the call's type.
    /// The alias shares the memory (it lives as long as the longest-lived of them) and its launches are
    /// checked like this buffer's.
    ///
    /// # Safety
    ///
    /// The borrow rules protect each buffer alone: the caller makes sure no two aliases are used in ways
    /// that race (a kernel writing through one while the host or another kernel uses the other).
    pub unsafe fn alias<U: DeviceCopy>(&self, len: usize) -> Result<SymBuffer<U>, Error> {
        // Refuses what no allocation of `U` could hold: an alignment above ALIGN, a size that overflows.
        allocation_bytes::<U>(len)?;
        let bytes = len * size_of::<U>();
        if bytes > self.alloc.bytes {
            return Err(Error::LengthMismatch {
                relation: "alias bytes <= allocation bytes",
                left: bytes,
                right: self.alloc.bytes,
            });
        }
        Ok(SymBuffer { alloc: Arc::clone(&self.alloc), len, _elem: PhantomData })
    }

    /// A handle that does not keep the memory alive: a registry's way to find a buffer its owner may
    /// already have dropped.
    pub fn downgrade(&self) -> WeakSymBuffer<T> {
        WeakSymBuffer { alloc: Arc::downgrade(&self.alloc), len: self.len, _elem: PhantomData }
    }

    /// Whether `addr` lies in rank `rank`'s part of this buffer's memory (a framework's tensor that may be
    /// one of this buffer's aliases).
    pub fn contains(&self, rank: usize, addr: u64) -> bool {
        self.alloc.part(rank).is_ok_and(|base| (base..base + self.alloc.bytes as u64).contains(&addr))
    }

    /// Checks the buffer may be used by a launch on `rank`: same team, same device, same world.
    pub fn check_for(&self, rank: &RankRef<'_>) -> Result<(), Error> {
        check_owner(&self.alloc.team, rank)
    }
}

/// A [`SymBuffer`] that does not keep its memory alive ([`SymBuffer::downgrade`]).
pub struct WeakSymBuffer<T: DeviceCopy> {
    alloc: std::sync::Weak<Allocation>,
    len: usize,
    _elem: PhantomData<T>,
}

impl<T: DeviceCopy> WeakSymBuffer<T> {
    /// The buffer, if its memory is still alive.
    pub fn upgrade(&self) -> Option<SymBuffer<T>> {
        Some(SymBuffer { alloc: self.alloc.upgrade()?, len: self.len, _elem: PhantomData })
    }
}

impl<T: DeviceCopy> fmt::Debug for WeakSymBuffer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WeakSymBuffer")
            .field("len", &self.len)
            .field("alive", &(self.alloc.strong_count() > 0))
            .finish()
    }
}

/// Whether memory allocated by `owner` may be handed to a kernel running on `rank`.
pub(crate) fn check_owner(owner: &TeamShared, rank: &RankRef<'_>) -> Result<(), Error> {
    if owner.id == rank.team_id() {
        return Ok(());
    }
    if owner.world != rank.world() {
        return Err(Error::NotSymmetric { buffer_world: owner.world, team_world: rank.world() });
    }
    let buffer = owner.devices[rank.rank()];
    if buffer != rank.device() {
        return Err(Error::WrongDevice { rank: rank.rank(), buffer, team: rank.device() });
    }
    Err(Error::ForeignBuffer { buffer_team: owner.id, team: rank.team_id(), argument: None })
}

pub(crate) fn as_bytes<T: DeviceCopy>(data: &[T]) -> &[u8] {
    // SAFETY: `DeviceCopy` types are plain data without padding; the byte view covers exactly `data`.
    unsafe { std::slice::from_raw_parts(data.as_ptr().cast::<u8>(), std::mem::size_of_val(data)) }
}

impl<T: DeviceCopy> fmt::Debug for SymBuffer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SymBuffer")
            .field("elem", &std::any::type_name::<T>())
            .field("len", &self.len)
            .field("world", &self.alloc.team.world)
            .field("team", &self.alloc.team.id)
            .finish()
    }
}

/// `ferrocomm_device::half::bf16` → `bf16`, `[core::primitive::u32; 4]` → `[u32; 4]`: type names without
/// their paths.
fn short_type_name(full: &str) -> String {
    let mut out = String::with_capacity(full.len());
    let mut word = String::new();
    let mut chars = full.chars().peekable();
    while let Some(c) = chars.next() {
        if c.is_alphanumeric() || c == '_' {
            word.push(c);
        } else if c == ':' && chars.peek() == Some(&':') {
            chars.next();
            word.clear();
        } else {
            out.push_str(&word);
            word.clear();
            out.push(c);
        }
    }
    out.push_str(&word);
    out
}

#[cfg(test)]
mod tests {
    use super::short_type_name;

    #[test]
    fn type_names_lose_their_paths() {
        assert_eq!(short_type_name("u32"), "u32");
        assert_eq!(short_type_name("ferrocomm_device::half::bf16"), "bf16");
        assert_eq!(short_type_name("[core::primitive::u32; 4]"), "[u32; 4]");
    }
}
