//! The caller's CUDA streams, as the backends launch on them.

use std::fmt;
use std::sync::Arc;

use cudarc::driver::CudaStream;
use cudarc::driver::sys::CUstream;

/// A CUDA stream the caller owns, in the primary context of the device of the rank it is bound for.
#[derive(Clone)]
pub struct ExternalStream {
    raw: usize,
    /// Keeps a cudarc stream alive while ferrocomm holds it.
    _owner: Option<Arc<CudaStream>>,
}

impl ExternalStream {
    /// A stream given by its driver handle, as torch gives it (`torch.cuda.current_stream().cuda_stream`; 0
    /// is the legacy default stream).
    ///
    /// # Safety
    ///
    /// `raw` is a live stream (or 0) and stays alive while it is bound and until the work ferrocomm queued
    /// on it has finished.
    pub unsafe fn from_raw(raw: CUstream) -> ExternalStream {
        ExternalStream { raw: raw as usize, _owner: None }
    }

    /// A cudarc stream (as candle and mistral.rs hold theirs); ferrocomm keeps it alive while it holds it.
    pub fn from_cudarc(stream: &Arc<CudaStream>) -> ExternalStream {
        ExternalStream { raw: stream.cu_stream() as usize, _owner: Some(Arc::clone(stream)) }
    }

    /// The driver handle.
    pub fn as_raw(&self) -> CUstream {
        self.raw as CUstream
    }

    /// The handle as a number (how the team remembers streams with work queued on them).
    pub(crate) fn id(&self) -> usize {
        self.raw
    }
}

impl fmt::Debug for ExternalStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ExternalStream({:#x})", self.raw)
    }
}

/// Whether a caller's stream runs what is queued on it or records it, as a launch needs to know.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StreamState {
    /// It runs its work in order.
    Running,
    /// It is capturing a graph: launches are recorded, and it must not be queried or waited on.
    Capturing,
}
