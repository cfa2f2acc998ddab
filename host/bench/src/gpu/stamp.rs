//! Clock stamps for the modes driven through the CUDA driver alone (cpu, nccl): a one-thread kernel that
//! writes the GPU's `%globaltimer` into a slot, launched on a rank's stream before and after each isolated
//! operation. It is the same stamp as the gpu mode's (`ferrocomm_kernels`' `clock_stamp`), so the modes'
//! isolated series are timed alike: between two kernels on every rank's stream, neither of which starts
//! the next launch early.
//!
//! These modes load no kernels crate, so the kernel is written here in PTX (eight instructions), and the
//! suite assembles it with ptxas for sm_80 and sm_90 like every other module.

use std::ffi::CString;
use std::sync::Arc;

use cudarc::driver::sys::{self, CUdeviceptr};
use cudarc::driver::{CudaContext, DriverError, result};

use crate::backend::BackendError;
use crate::gpu::{DeviceBuffer, Gpus};
use crate::model::Mode;

/// The stamp kernel: `ferrocomm_bench_stamp(u64 *slots, u32 slot)` stores `%globaltimer` at `slots[slot]`.
pub const STAMP_PTX: &str = "\
.version 7.0
.target sm_80
.address_size 64

.visible .entry ferrocomm_bench_stamp(
    .param .u64 slots,
    .param .u32 slot
)
{
    .reg .b32 %r<2>;
    .reg .b64 %rd<5>;

    ld.param.u64 %rd1, [slots];
    ld.param.u32 %r1, [slot];
    cvta.to.global.u64 %rd2, %rd1;
    mul.wide.u32 %rd3, %r1, 8;
    add.s64 %rd2, %rd2, %rd3;
    mov.u64 %rd4, %globaltimer;
    st.global.u64 [%rd2], %rd4;
    ret;
}
";

/// The kernel's name in [`STAMP_PTX`].
const STAMP_NAME: &str = "ferrocomm_bench_stamp";

/// A stamp kernel and `2 × spans` slots on every rank of a [`Gpus`].
#[derive(Debug)]
pub struct StampSlots {
    // Field order is drop order: slots before the modules (both belong to contexts `Gpus` keeps alive).
    slots: Vec<DeviceBuffer>,
    kernels: Vec<Kernel>,
    spans: u64,
}

/// One rank's loaded module and function.
#[derive(Debug)]
struct Kernel {
    ctx: Arc<CudaContext>,
    module: sys::CUmodule,
    function: sys::CUfunction,
}

impl StampSlots {
    /// Loads the kernel and allocates slots for `spans` spans on every rank of `gpus`.
    pub fn new(gpus: &Gpus, spans: u64) -> Result<StampSlots, BackendError> {
        let spans = spans.max(1);
        let bytes = usize::try_from(spans * 2 * 8).unwrap_or(usize::MAX);
        let mut out = StampSlots { slots: Vec::new(), kernels: Vec::new(), spans };
        for (rank, ctx) in gpus.ctxs.iter().enumerate() {
            ctx.bind_to_thread().map_err(BackendError::driver("binding a context"))?;
            let what = || format!("loading the clock-stamp kernel on rank {rank}");
            let source = CString::new(STAMP_PTX).map_err(|_| BackendError::Driver {
                what: what(),
                source: DriverError(sys::CUresult::CUDA_ERROR_INVALID_PTX),
            })?;
            // SAFETY: `source` is a NUL-terminated PTX module; the rank's context is current.
            let module =
                unsafe { result::module::load_data(source.as_ptr().cast()) }.map_err(BackendError::driver(what()))?;
            // SAFETY: `module` was just loaded and is not unloaded before this handle goes (Drop).
            let function =
                unsafe { result::module::get_function(module, CString::new(STAMP_NAME).unwrap_or_default()) };
            out.kernels.push(Kernel {
                ctx: ctx.clone(),
                module,
                function: function.map_err(BackendError::driver(what()))?,
            });
            out.slots.push(DeviceBuffer::zeroed(ctx, bytes)?);
        }
        Ok(out)
    }

    /// Spans the slots hold.
    pub fn spans(&self) -> u64 {
        self.spans
    }

    /// Enqueues the stamp of `slot` on `rank`'s stream (in a capture, records it).
    pub fn stamp(&self, gpus: &Gpus, rank: usize, slot: u32) -> Result<(), BackendError> {
        assert!(u64::from(slot) < self.spans * 2, "stamp slot {slot} of {} spans", self.spans);
        gpus.ctxs[rank].bind_to_thread().map_err(BackendError::driver("binding a context"))?;
        let mut ptr: CUdeviceptr = self.slots[rank].ptr();
        let mut slot = slot;
        let mut args = [(&raw mut ptr).cast(), (&raw mut slot).cast()];
        // SAFETY: the function takes (u64 pointer, u32), which `args` points at; the slots hold `slot`;
        // the stream belongs to `rank`'s context, which is current.
        unsafe {
            result::launch_kernel(
                self.kernels[rank].function,
                (1, 1, 1),
                (1, 1, 1),
                0,
                gpus.streams[rank].cu_stream(),
                &mut args,
            )
        }
        .map_err(BackendError::driver(format!("launching the clock stamp on rank {rank}")))
    }

    /// Zeroes every slot (the streams are idle).
    pub fn clear(&self) -> Result<(), BackendError> {
        self.slots.iter().try_for_each(|s| s.clear(s.bytes()))
    }

    /// Each of the first `spans` spans' time, µs: for span `i` the longest over `ranks` of the time between
    /// slots `2i` and `2i + 1` (the streams are idle). A slot left at zero is a stamp that did not run.
    pub fn each_us(&self, mode: Mode, ranks: &[usize], spans: u64) -> Result<Vec<f64>, BackendError> {
        let spans = spans.min(self.spans) as usize;
        let mut longest = vec![0u64; spans];
        for &rank in ranks {
            let raw = self.slots[rank].read(spans * 16)?;
            let stamps: Vec<u64> =
                raw.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8]))).collect();
            for (i, span) in longest.iter_mut().enumerate() {
                let (start, end) = (stamps[2 * i], stamps[2 * i + 1]);
                if start == 0 || end < start {
                    let why = if start == 0 { "a stamp kernel did not run" } else { "the clock went backwards" };
                    let source = format!("rank {rank}: clock stamps {start} → {end} ns of operation {i}: {why}");
                    return Err(BackendError::External { mode, source: source.into() });
                }
                *span = (*span).max(end - start);
            }
        }
        Ok(longest.into_iter().map(|ns| ns as f64 / 1e3).collect())
    }
}

impl Drop for StampSlots {
    fn drop(&mut self) {
        for kernel in &self.kernels {
            if kernel.ctx.bind_to_thread().is_err() {
                continue;
            }
            // SAFETY: each module was loaded once by `new`; its functions are not used after this.
            let _ = unsafe { result::module::unload(kernel.module) };
        }
    }
}
