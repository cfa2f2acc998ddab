//! NCCL's all-reduce on a team's own streams: what a stack without GPU-initiated communication runs between
//! its kernels, for the decode step's CPU-orchestrated variant ([`crate::tp_decode`]).
//!
//! NCCL (`libnccl.so.2`) is loaded at run time. Each process opens one communicator for its one rank
//! (`ncclCommInitRank`, rank 0's unique id carried over the team's rendezvous) and enqueues its
//! collectives on that rank's stream ([`Team::cuda_stream`]), so they are ordered with the rank's kernels
//! and recorded into the rank's graph by a capture. Where NCCL cannot run this way, [`NcclAllReduce::open`]
//! says why ([`NcclUnavailable`]).

use std::ffi::CStr;
use std::sync::Arc;

use cudarc::driver::CudaStream;
use cudarc::nccl::result::{self as nccl, NcclError};
use cudarc::nccl::sys;
use ferrocomm::{Backend, SymBuffer, Team};

use crate::ExampleError;

/// Why NCCL cannot run on a team (not a failure: the variant that needs it is left out, saying this).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct NcclUnavailable(pub String);

/// NCCL's sum all-reduce of `f32` buffers on this process's one rank of a team.
pub struct NcclAllReduce {
    comm: sys::ncclComm_t,
    rank: usize,
    stream: Arc<CudaStream>,
}

impl std::fmt::Debug for NcclAllReduce {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NcclAllReduce").field("rank", &self.rank).finish_non_exhaustive()
    }
}

/// NCCL's message for `e`, with what was being done.
fn nccl_error(what: impl Into<String>) -> impl FnOnce(NcclError) -> ExampleError {
    let what = what.into();
    move |e| {
        // SAFETY: ncclGetErrorString returns a static NUL-terminated string for any result code.
        let text = unsafe { CStr::from_ptr(sys::ncclGetErrorString(e.0)) };
        ExampleError::Nccl {
            what,
            message: format!("{} ({:?}; NCCL_DEBUG=WARN says more)", text.to_string_lossy(), e.0),
        }
    }
}

impl NcclAllReduce {
    /// Opens a communicator for this process's rank of `team` (every process of the team calls it).
    ///
    /// `Ok(Err(..))` where NCCL cannot run here: on the emulator, without `libnccl.so.2`, with ranks
    /// sharing a GPU (NCCL refuses it: "Duplicate GPU detected"), or with several ranks in this process
    /// (NCCL's calls for them would have to be grouped and captured into one graph, and a team records one
    /// graph per rank: run one process per GPU under a launcher instead).
    pub fn open(team: &Team) -> Result<Result<NcclAllReduce, NcclUnavailable>, ExampleError> {
        let unavailable = |why: String| Ok(Err(NcclUnavailable(why)));
        if team.backend() == Backend::Emulator {
            return unavailable("the emulator has no NCCL".into());
        }
        // SAFETY: only tries to dlopen the library by its usual names.
        if !unsafe { sys::is_culib_present() } {
            return unavailable("libnccl.so.2 was not found (pip install nvidia-nccl-cu13, or LD_LIBRARY_PATH)".into());
        }
        if crate::team::ranks_per_gpu(team) > 1 {
            return unavailable("ranks share a GPU, which NCCL refuses (\"Duplicate GPU detected\")".into());
        }
        let local = team.local_ranks();
        let &[rank] = local.as_slice() else {
            return unavailable(format!(
                "this process runs {} ranks; NCCL needs one process per GPU here \
                 (e.g. `ferrocomm launch -n {} -- PROGRAM`, or torchrun)",
                local.len(),
                team.world()
            ));
        };
        let Some(stream) = team.cuda_stream(rank)? else {
            return unavailable("the team has no CUDA streams".into());
        };
        let id = team.share_from_rank_zero("NCCL's unique id", || {
            let id = nccl::get_uniqueid()
                .map_err(|e| ferrocomm::Error::TeamConfig { reason: format!("ncclGetUniqueId failed: {e:?}") })?;
            Ok(id.internal.iter().map(|&c| c as u8).collect())
        })?;
        let mut unique = sys::ncclUniqueId { internal: [0; 128] };
        if id.len() != unique.internal.len() {
            let message = format!("rank 0 sent {} bytes, not {}", id.len(), unique.internal.len());
            return Err(ExampleError::Nccl { what: "sharing NCCL's unique id".into(), message });
        }
        for (to, from) in unique.internal.iter_mut().zip(&id) {
            *to = *from as _;
        }
        let mut comm = std::ptr::null_mut();
        stream.context().bind_to_thread().map_err(|e| ExampleError::Nccl {
            what: format!("making rank {rank}'s GPU current"),
            message: format!("{e:?}"),
        })?;
        // SAFETY: `comm` receives the communicator; every process of the team calls this with the same id.
        unsafe { nccl::comm_init_rank(&mut comm, team.world() as i32, unique, rank as i32) }
            .map_err(nccl_error(format!("creating rank {rank}'s communicator (ncclCommInitRank)")))?;
        Ok(Ok(NcclAllReduce { comm, rank, stream }))
    }

    /// Enqueues the in-place sum of `buf` over the ranks on this rank's stream (inside a capture, records
    /// it). Every rank must call it with a buffer of the same length.
    pub fn sum_in_place(&self, buf: &mut SymBuffer<f32>) -> Result<(), ExampleError> {
        let ptr = buf.address(self.rank)?;
        let stream = self.stream.cu_stream() as sys::cudaStream_t;
        // SAFETY: `ptr` is this rank's part of `buf`, `buf.len()` f32s on this rank's GPU; the stream is the
        // rank's, so the reduction runs after the kernels that wrote `buf` and before those that read it.
        unsafe {
            nccl::all_reduce(
                ptr as *const _,
                ptr as *mut _,
                buf.len(),
                sys::ncclDataType_t::ncclFloat32,
                sys::ncclRedOp_t::ncclSum,
                self.comm,
                stream,
            )
        }
        .map(drop)
        .map_err(nccl_error(format!("all-reduce of {} f32 on rank {}", buf.len(), self.rank)))
    }
}

impl Drop for NcclAllReduce {
    fn drop(&mut self) {
        // Work enqueued on the stream may still use the communicator.
        let _ = self.stream.synchronize();
        // SAFETY: the communicator came from ncclCommInitRank and is destroyed once, with nothing pending.
        let _ = unsafe { nccl::comm_destroy(self.comm) };
    }
}
