//! Peer access: every GPU of a team maps every other's memory, or the team is not built and the error
//! names the pair and their link.

use cudarc::driver::sys::{self, CUresult};

use super::CudaGpu;
use crate::error::Error;
use crate::names::{Device, Link};
use crate::system;

/// Checks and enables peer access for every ordered pair of distinct GPUs.
pub(super) fn enable_all(gpus: &[CudaGpu]) -> Result<(), Error> {
    for a in gpus {
        for b in gpus.iter().filter(|b| b.ordinal != a.ordinal) {
            let link = system::link(a.ordinal, b.ordinal)?;
            if link == Link::None {
                return Err(Error::PeerAccess { a: a.ordinal, b: b.ordinal, link });
            }
            enable(a, b)?;
            tracing::debug!(a = a.ordinal, b = b.ordinal, %link, "peer access enabled");
        }
    }
    Ok(())
}

/// Lets `a`'s context address `b`'s memory.
fn enable(a: &CudaGpu, b: &CudaGpu) -> Result<(), Error> {
    let on = Some(Device::Cuda { ordinal: a.ordinal });
    a.ctx.bind_to_thread().map_err(crate::error::cuda("cuCtxSetCurrent", on))?;
    // SAFETY: both contexts are alive primary contexts; `a`'s is current.
    match unsafe { sys::cuCtxEnablePeerAccess(b.ctx.cu_ctx(), 0) } {
        // Primary contexts are per process: another team may have enabled it already.
        CUresult::CUDA_SUCCESS | CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED => Ok(()),
        CUresult::CUDA_ERROR_PEER_ACCESS_UNSUPPORTED => {
            Err(Error::PeerAccess { a: a.ordinal, b: b.ordinal, link: system::link(a.ordinal, b.ordinal)? })
        }
        other => {
            Err(Error::Cuda { call: "cuCtxEnablePeerAccess", device: on, source: cudarc::driver::DriverError(other) })
        }
    }
}
