//! The CUDA backend's memory for a team that spans processes: every allocation is a VMM mapping
//! (`cuMemCreate` with a POSIX-fd handle) that other processes of the host map from its descriptor, and
//! every peer's part this process maps is one too. Plain `cuMemAlloc` memory cannot be shared that way.

use std::collections::HashMap;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::sync::{Arc, Mutex, PoisonError};

use cudarc::driver::CudaContext;

use super::vmm::VmmMapping;
use crate::error::Error;

/// This process's VMM mappings, own and imported, by address; dropping one unmaps it.
#[derive(Debug)]
pub(crate) struct ShareableHeap {
    ctx: Arc<CudaContext>,
    mappings: Mutex<HashMap<u64, VmmMapping>>,
}

impl ShareableHeap {
    /// A heap on the GPU of `ctx`, which must support POSIX-fd shareable VMM allocations.
    pub fn new(ctx: Arc<CudaContext>) -> Result<ShareableHeap, Error> {
        let ordinal = ctx.ordinal();
        if !VmmMapping::supported(ordinal)? {
            return Err(Error::TeamConfig {
                reason: format!(
                    "GPU {ordinal} cannot share memory with other processes (no virtual memory management with POSIX \
                     file-descriptor handles); run the team in one process"
                ),
            });
        }
        Ok(ShareableHeap { ctx, mappings: Mutex::new(HashMap::new()) })
    }

    fn keep(&self, mapping: VmmMapping) -> u64 {
        let addr = mapping.ptr();
        self.mappings.lock().unwrap_or_else(PoisonError::into_inner).insert(addr, mapping);
        addr
    }

    /// `bytes` of zeroed device memory, shareable (rounded up to the allocation granularity).
    pub fn alloc(&self, bytes: usize) -> Result<u64, Error> {
        Ok(self.keep(VmmMapping::create(&self.ctx, bytes)?))
    }

    /// Unmaps an allocation or an imported mapping (the memory lives on while other processes map it).
    pub fn release(&self, addr: u64) {
        drop(self.mappings.lock().unwrap_or_else(PoisonError::into_inner).remove(&addr));
    }

    /// A descriptor of allocation `addr` for another process.
    pub fn export(&self, addr: u64) -> Result<OwnedFd, Error> {
        let mappings = self.mappings.lock().unwrap_or_else(PoisonError::into_inner);
        let mapping = mappings.get(&addr).ok_or_else(|| Error::TeamConfig {
            reason: format!("address {addr:#x} is not a shareable allocation of this process"),
        })?;
        mapping.export()
    }

    /// Maps another process's allocation of `bytes` from its descriptor, for this GPU.
    pub fn import(&self, fd: BorrowedFd<'_>, bytes: usize) -> Result<u64, Error> {
        Ok(self.keep(VmmMapping::import(&self.ctx, fd, bytes)?))
    }
}
