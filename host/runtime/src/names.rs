//! How errors, traces and the team name what they speak of: a device, the link between two, a GPU thread,
//! a byte of a buffer, a signal, a source location in device code, a wait's comparison. Plain values, with
//! no behaviour beyond their display: every other module of the runtime may use them, and they use none.

use std::fmt;

/// The device a rank runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Device {
    /// A CUDA GPU, by driver ordinal.
    Cuda {
        /// The driver's ordinal.
        ordinal: usize,
    },
    /// One of the emulator's GPUs.
    Emulated {
        /// Its index in the team's emulated GPUs.
        gpu: usize,
    },
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Device::Cuda { ordinal } => write!(f, "GPU {ordinal}"),
            Device::Emulated { gpu } => write!(f, "emulated GPU {gpu}"),
        }
    }
}

/// How two GPUs are connected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Link {
    /// NVLink (peer access with native atomics over the link).
    NvLink,
    /// PCIe peer-to-peer (peer access, atomics not native).
    Pcie,
    /// No peer access at all.
    None,
}

impl fmt::Display for Link {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Link::NvLink => "NVLink",
            Link::Pcie => "PCIe",
            Link::None => "none",
        })
    }
}

/// A source location recorded by device code.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Location {
    /// The file, as the compiler spelled it (longer names keep their tail).
    pub file: String,
    /// Line.
    pub line: u32,
    /// Column.
    pub column: u32,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.file.is_empty() {
            write!(f, "<unknown location>")
        } else {
            write!(f, "{}:{}:{}", self.file, self.line, self.column)
        }
    }
}

/// The comparison a timed-out wait was making (the device's `signal::Cmp`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cmp {
    /// Waited for `signal == expected`.
    Eq,
    /// Waited for `signal >= expected`.
    Ge,
    /// Waited for `signal != expected`.
    Ne,
    /// A code this runtime does not know.
    Other(u32),
}

impl Cmp {
    /// Decodes the record's `cmp` field.
    pub fn from_u32(v: u32) -> Cmp {
        match v {
            0 => Cmp::Eq,
            1 => Cmp::Ge,
            2 => Cmp::Ne,
            other => Cmp::Other(other),
        }
    }
}

impl fmt::Display for Cmp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Cmp::Eq => write!(f, "=="),
            Cmp::Ge => write!(f, ">="),
            Cmp::Ne => write!(f, "!="),
            Cmp::Other(v) => write!(f, "<cmp {v}>"),
        }
    }
}

/// The signal a timed-out wait was polling.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SignalRef {
    /// A signal of a [`SignalPadBuffer`](crate::SignalPadBuffer).
    Pad {
        /// The pad's name.
        name: String,
        /// Whose copy of the pad (the rank whose memory holds it).
        owner: usize,
        /// The signal's index in the pad.
        index: usize,
    },
    /// An address that is no known signal pad.
    Address(u64),
}

impl fmt::Display for SignalRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SignalRef::Pad { name, owner, index } => write!(f, "signal `{name}`[{index}] (rank {owner}'s copy)"),
            SignalRef::Address(addr) => write!(f, "the signal at {addr:#x}"),
        }
    }
}

/// A byte of device memory, named after the buffer that holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BufferRef {
    /// An element of a symmetric buffer or a signal pad.
    Element {
        /// The buffer: `SymBuffer<u32> #3` (`#` the allocation's number), its name when it was given one
        /// ([`SymBuffer::named`](crate::SymBuffer::named)), or `signal pad `ready``.
        buffer: String,
        /// Whose copy (the rank whose memory holds it).
        owner: usize,
        /// The element's index.
        index: usize,
    },
    /// An address in no buffer this team allocated.
    Address(u64),
}

impl fmt::Display for BufferRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BufferRef::Element { buffer, owner, index } => {
                write!(f, "element {index} of {buffer} (rank {owner}'s copy)")
            }
            BufferRef::Address(addr) => write!(f, "address {addr:#x}"),
        }
    }
}

/// One GPU thread of a launch: the thread that recorded a device error, or the other party of a checker
/// finding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GpuThread {
    /// Its rank.
    pub rank: usize,
    /// Its block index.
    pub block: [u32; 3],
    /// Its thread index in the block.
    pub thread: [u32; 3],
}

impl From<ferrocomm_device::abi::ThreadRef> for GpuThread {
    /// A thread as a device record names it.
    fn from(t: ferrocomm_device::abi::ThreadRef) -> GpuThread {
        GpuThread { rank: t.rank as usize, block: t.block, thread: t.thread }
    }
}

impl fmt::Display for GpuThread {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "rank {} block {:?} thread {:?}", self.rank, self.block, self.thread)
    }
}
