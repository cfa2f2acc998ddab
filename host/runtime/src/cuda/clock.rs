//! How far each GPU's `%globaltimer` is from the host clock, so the traces of several GPUs share one time
//! axis. A one-thread kernel stores `%globaltimer`; the host brackets its launch and synchronisation with
//! its own clock and takes the midpoint of the tightest of a few tries (the error is half that round trip,
//! a few microseconds — the same for every rank, so events of different GPUs line up to about that).

use std::ffi::{CString, c_void};

use cudarc::driver::result;

use super::CudaTeam;
use crate::error::{Error, cuda};
use crate::exec::host_ns;

/// `*out = %globaltimer`.
const GLOBALTIMER_PTX: &str = r#"
.version 7.0
.target sm_80
.address_size 64

.visible .entry ferrocomm_globaltimer(
    .param .u64 out
)
{
    .reg .b64 %rd<3>;

    ld.param.u64 %rd1, [out];
    cvta.to.global.u64 %rd1, %rd1;
    mov.u64 %rd2, %globaltimer;
    st.global.u64 [%rd1], %rd2;
    ret;
}
"#;

/// Tries per rank; the one with the shortest round trip counts.
const TRIES: usize = 8;

impl CudaTeam {
    /// Per local rank: `%globaltimer - host clock` in nanoseconds.
    pub(crate) fn measure_clock_offsets(&self) -> Result<Vec<i64>, Error> {
        (0..self.ranks.len()).map(|slot| self.clock_offset(slot)).collect()
    }

    fn clock_offset(&self, slot: usize) -> Result<i64, Error> {
        let device = self.gpu_of(slot).device();
        let on = Some(device);
        self.bind(slot)?;
        let image = CString::new(GLOBALTIMER_PTX).expect("the embedded PTX has no NUL byte");
        // SAFETY: `image` is a NUL-terminated PTX string; the rank's context is current.
        let module = unsafe { result::module::load_data(image.as_ptr().cast()) }.map_err(|source| Error::PtxLoad {
            module: "ferrocomm_globaltimer",
            cc: 80,
            device,
            source,
        })?;
        let name = CString::new("ferrocomm_globaltimer").expect("no NUL");
        let measured = (|| -> Result<i64, Error> {
            // SAFETY: `module` is loaded in the current context.
            let func =
                unsafe { result::module::get_function(module, name) }.map_err(cuda("cuModuleGetFunction", on))?;
            // SAFETY: a plain allocation in the current context, freed below.
            let buf = unsafe { result::malloc_sync(8) }.map_err(cuda("cuMemAlloc", on))?;
            let mut best: Option<(u64, i64)> = None;
            let mut run = || -> Result<(), Error> {
                for _ in 0..TRIES {
                    let mut out = buf;
                    let mut params = [(&raw mut out).cast::<c_void>()];
                    let before = host_ns();
                    // SAFETY: the parameter array matches the kernel's (.u64) signature; `buf` holds 8 bytes.
                    unsafe { result::launch_kernel(func, (1, 1, 1), (1, 1, 1), 0, std::ptr::null_mut(), &mut params) }
                        .map_err(cuda("cuLaunchKernel", on))?;
                    result::ctx::synchronize().map_err(cuda("cuCtxSynchronize", on))?;
                    let after = host_ns();
                    let mut gpu = [0u64];
                    // SAFETY: `buf` holds 8 bytes and the kernel has finished.
                    unsafe { result::memcpy_dtoh_sync(&mut gpu, buf) }.map_err(cuda("cuMemcpyDtoH", on))?;
                    let round_trip = after - before;
                    let offset = gpu[0] as i64 - (before + round_trip / 2) as i64;
                    if best.is_none_or(|(rt, _)| round_trip < rt) {
                        best = Some((round_trip, offset));
                    }
                }
                Ok(())
            };
            let ran = run();
            // SAFETY: allocated above; the context was synchronised (or the launch failed).
            let freed = unsafe { result::free_sync(buf) }.map_err(cuda("cuMemFree", on));
            ran?;
            freed?;
            Ok(best.map(|(_, o)| o).unwrap_or(0))
        })();
        // SAFETY: loaded above; nothing of it runs any more.
        let unloaded = unsafe { result::module::unload(module) }.map_err(cuda("cuModuleUnload", on));
        let offset = measured?;
        unloaded?;
        tracing::debug!(slot, offset_ns = offset, "GPU clock offset for traces");
        Ok(offset)
    }
}
