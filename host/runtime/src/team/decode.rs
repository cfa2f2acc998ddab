//! Device error records → [`DeviceError`]s: the record's fields read as its kind says (see the device
//! library's `ErrorRecord`), and every address named after the pad or buffer that holds it.

use ferrocomm_device::abi::{ErrorKind, ErrorRecord, MismatchScope, SourceCheck, ThreadRef};

use super::TeamShared;
use crate::error::{BufferRef, Cmp, DeviceError, GpuThread, Location, SignalRef};

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl TeamShared {
    /// Decodes rank `rank`'s record `r`.
    pub(crate) fn decode(&self, rank: usize, r: &ErrorRecord) -> DeviceError {
        let location = Location { file: r.file_name().to_owned(), line: r.line, column: r.column };
        let rank = if (r.rank as usize) < self.world { r.rank as usize } else { rank };
        let (block, thread) = (r.block, r.thread);
        let at = GpuThread { rank, block, thread };
        match ErrorKind::from_u32(r.kind) {
            Some(kind @ (ErrorKind::Timeout | ErrorKind::UnraisedSignal)) => {
                let (signal, expected, observed) = (self.name_signal(r.signal), r.expected, r.observed);
                let cmp = Cmp::from_u32(r.cmp);
                if kind == ErrorKind::Timeout {
                    DeviceError::Timeout { at, signal, expected, observed, cmp, location }
                } else {
                    DeviceError::UnraisedSignal { at, signal, expected, observed, cmp, location }
                }
            }
            Some(ErrorKind::Panic) => DeviceError::KernelPanic { at, location, message: r.message().to_owned() },
            Some(ErrorKind::Aborted) => DeviceError::Aborted {
                at,
                signal: self.name_signal(r.signal),
                expected: r.expected,
                observed: r.observed,
                cmp: Cmp::from_u32(r.cmp),
                origin: r.origin.checked_sub(1).map(|o| o as usize).filter(|&o| o < self.world),
                location,
            },
            Some(ErrorKind::Race) => {
                let w = ThreadRef::unpack(r.expected, r.observed);
                DeviceError::Race {
                    at,
                    buffer: self.name_buffer(r.signal),
                    bytes: r.cmp,
                    writer: GpuThread::from(w),
                    location,
                }
            }
            Some(ErrorKind::UnorderedPut) => {
                let reader = ThreadRef::unpack(r.expected, r.observed);
                DeviceError::UnorderedPut {
                    at,
                    buffer: self.name_buffer(r.signal),
                    bytes: r.cmp,
                    reader: GpuThread::from(reader),
                    location,
                }
            }
            Some(ErrorKind::SourceOverwritten) => DeviceError::SourceOverwritten {
                at,
                source_byte: self.name_buffer(r.signal),
                destination: self.name_buffer(r.expected),
                quieted: SourceCheck::from_u32(r.cmp) != Some(SourceCheck::AtThreadEnd),
                location,
            },
            Some(ErrorKind::BarrierMismatch) => DeviceError::BarrierMismatch {
                rank,
                block: (MismatchScope::from_u32(r.cmp) == Some(MismatchScope::Blocks)).then_some(block),
                pad: self.name_pad(r.signal),
                expected: r.expected,
                observed: r.observed,
                location: (!location.file.is_empty()).then_some(location),
            },
            None => DeviceError::Unknown { rank, kind: r.kind },
        }
    }

    /// Maps a signal's address to the pad and index that hold it.
    pub fn name_signal(&self, addr: u64) -> SignalRef {
        for pad in lock(&self.pads).iter() {
            for &(owner, base, bytes) in &pad.ranges {
                if addr >= base && addr < base + bytes as u64 {
                    let index = (addr - base) as usize / pad.elem_bytes.max(1);
                    return SignalRef::Pad { name: pad.name.clone(), owner, index };
                }
            }
        }
        SignalRef::Address(addr)
    }

    /// Maps an address to the element of the pad or symmetric buffer that holds it.
    pub(crate) fn name_buffer(&self, addr: u64) -> BufferRef {
        if let SignalRef::Pad { name, owner, index } = self.name_signal(addr) {
            return BufferRef::Element { buffer: format!("signal pad `{name}`"), owner, index };
        }
        for b in lock(&self.buffers).iter() {
            for &(owner, base, bytes) in &b.ranges {
                if addr >= base && addr < base + bytes as u64 {
                    let index = (addr - base) as usize / b.elem_bytes.max(1);
                    return BufferRef::Element { buffer: b.label.clone(), owner, index };
                }
            }
        }
        BufferRef::Address(addr)
    }

    /// Names the signal pad whose copy starts at `base`.
    pub(crate) fn name_pad(&self, base: u64) -> String {
        for pad in lock(&self.pads).iter() {
            if let Some(&(owner, _, _)) = pad.ranges.iter().find(|&&(_, b, _)| b == base) {
                return format!("`{}` (rank {owner}'s copy)", pad.name);
            }
        }
        format!("at {base:#x}")
    }
}
