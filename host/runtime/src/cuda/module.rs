//! Loading a kernels crate's code once per rank (its SASS when built for the GPU, else its PTX, which the
//! driver JIT-compiles), writing the rank's `FERROCOMM_LAUNCH_CTX` into that instance, and finding kernels
//! in it.

use std::collections::HashMap;
use std::ffi::CString;
use std::mem::size_of;
use std::sync::{Arc, Mutex};

use cudarc::driver::sys::{self, CUfunction_attribute, CUresult};
use cudarc::driver::{CudaContext, DriverError, result};
use ferrocomm_device::abi::{LAUNCH_CTX_SYMBOL, LaunchCtx, TRACE_RING_SYMBOL};

use super::CudaTeam;
use crate::error::{Error, cuda};
use crate::exec::TeamView;
use crate::module::{KernelModule, ModuleImage};
use crate::names::Device;

/// One rank's instance of a module.
#[derive(Debug)]
pub(crate) struct LoadedModule {
    ctx: Arc<CudaContext>,
    module: sys::CUmodule,
    name: &'static str,
    /// The compute capability its image was built for.
    pub cc: u32,
    /// Kernel name → (function, dynamic shared memory it was opened up to).
    functions: Mutex<HashMap<&'static str, (sys::CUfunction, u32)>>,
}

// SAFETY: module and function handles are plain driver handles, usable from any thread once the owning
// context is current (every use binds it first); the map is behind a mutex.
unsafe impl Send for LoadedModule {}
// SAFETY: as above.
unsafe impl Sync for LoadedModule {}

impl Drop for LoadedModule {
    fn drop(&mut self) {
        if self.ctx.bind_to_thread().is_ok() {
            // SAFETY: loaded by `CudaTeam::module`; the team is settled (or poisoned, and then leaked whole).
            if let Err(e) = unsafe { result::module::unload(self.module) } {
                tracing::error!("unloading module `{}`: {e}", self.name);
            }
        }
    }
}

/// Dynamic shared memory every kernel may use without opting in.
const DEFAULT_SHARED_LIMIT: u32 = 48 * 1024;

/// Writes the address and capacity of the rank's trace ring into a traced module's `FERROCOMM_TRACE_RING`.
fn write_trace_ring(
    handle: sys::CUmodule,
    module: &str,
    [ring, capacity]: [u64; 2],
    device: Option<Device>,
) -> Result<(), Error> {
    let symbol = CString::new(TRACE_RING_SYMBOL).expect("no NUL");
    let mut words = ring.to_ne_bytes().to_vec();
    words.extend(capacity.to_ne_bytes());
    // SAFETY: the module is loaded in the current context.
    match unsafe { result::module::get_global(handle, symbol) } {
        Ok((addr, 16)) => {
            // SAFETY: `addr` is the 16-byte constant's device address; the context is current.
            unsafe { result::memcpy_htod_sync(addr, &words) }.map_err(cuda("cuMemcpyHtoD", device))
        }
        Ok((_, bytes)) => Err(Error::TeamConfig {
            reason: format!(
                "module `{module}` declares {TRACE_RING_SYMBOL} with {bytes} bytes, this runtime expects 16; build \
                 the kernels crate against the same ferrocomm-device as the runtime"
            ),
        }),
        // A traced module whose kernels record nothing may have dropped the global: nothing to tell it.
        Err(DriverError(CUresult::CUDA_ERROR_NOT_FOUND)) => Ok(()),
        Err(e) => Err(cuda("cuModuleGetGlobal", device)(e)),
    }
}

impl CudaTeam {
    /// Rank `rank`'s instance of `module`, loading it (and writing its launch context) on first use.
    pub fn module(
        &self,
        team: &dyn TeamView,
        rank: usize,
        module: &'static KernelModule,
    ) -> Result<Arc<LoadedModule>, Error> {
        let mut cache = self.ranks[rank].modules.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(m) = cache.get(&module.key()) {
            return Ok(Arc::clone(m));
        }
        let gpu = self.gpu_of(rank);
        let device = Some(gpu.device());
        // A traced team runs the traced flavour (see `ferrocomm_device::trace`), a team with NVSHMEM the
        // NVSHMEM flavour where the crate has one, every other team the ordinary modules.
        let ring = team.trace_ring(rank);
        let unreachable = team.heap().map(|nv| nv.first_unreachable());
        let (image, linked) = module.image_for_team(gpu.cc, ring.is_some(), unreachable, team.local()[rank])?;
        let cc = image.cc();
        // PTX must be NUL-terminated for the driver. A cubin is an ELF image, which the driver reads in place:
        // it is copied into 8-byte aligned memory (`include_bytes!` aligns to 1).
        let (text, aligned): (CString, Vec<u64>);
        let bytes: *const std::ffi::c_void = match image {
            ModuleImage::Ptx { ptx, .. } => {
                text = CString::new(ptx).map_err(|_| Error::TeamConfig {
                    reason: format!("module `{}` has a NUL byte in its PTX; rebuild the kernels crate", module.name()),
                })?;
                text.as_ptr().cast()
            }
            ModuleImage::Sass { cubin, .. } => {
                let mut words = vec![0u64; cubin.len().div_ceil(8)];
                for (word, chunk) in words.iter_mut().zip(cubin.chunks(8)) {
                    let mut raw = [0u8; 8];
                    raw[..chunk.len()].copy_from_slice(chunk);
                    *word = u64::from_ne_bytes(raw);
                }
                aligned = words;
                aligned.as_ptr().cast()
            }
        };
        self.bind(rank)?;
        let started = std::time::Instant::now();
        // SAFETY: `bytes` is a NUL-terminated PTX string or a whole cubin image, alive for the call; the
        // rank's context is current.
        let handle = unsafe { result::module::load_data(bytes) }.map_err(|source| Error::PtxLoad {
            module: module.name(),
            cc,
            device: gpu.device(),
            source,
        })?;
        if let (Some(nv), true, ModuleImage::Ptx { ptx, .. }) = (team.heap(), linked, image) {
            let bound = nv.bind_module(handle, module.name(), ptx);
            if let Err(e) = bound {
                // SAFETY: loaded above in the current context, used by nothing yet.
                let _ = unsafe { result::module::unload(handle) };
                return Err(e);
            }
        }
        let loaded = Arc::new(LoadedModule {
            ctx: Arc::clone(&gpu.ctx),
            module: handle,
            name: module.name(),
            cc,
            functions: Mutex::new(HashMap::new()),
        });
        let ms = started.elapsed().as_millis() as u64;
        tracing::debug!(module = module.name(), rank, cc, jit = image.is_jit(), ms, "module loaded");
        // `rank` numbers this backend's ranks; the context names the team rank it runs.
        let ctx = team.launch_ctx(team.local()[rank]);
        let symbol = CString::new(LAUNCH_CTX_SYMBOL).expect("no NUL");
        // SAFETY: the module is loaded in the current context.
        match unsafe { result::module::get_global(handle, symbol) } {
            Ok((addr, bytes)) if bytes == size_of::<LaunchCtx>() => {
                // SAFETY: `LaunchCtx` is repr(C) without padding (u32, u32, u64, pointer).
                let raw = unsafe { std::slice::from_raw_parts((&raw const ctx).cast::<u8>(), size_of::<LaunchCtx>()) };
                // Synchronous and on no stream of ours: a module may first load while a graph is captured.
                // SAFETY: `addr` is the global's device address, `bytes` long; the context is current.
                unsafe { result::memcpy_htod_sync(addr, raw) }.map_err(cuda("cuMemcpyHtoD", device))?;
            }
            Ok((_, bytes)) => {
                return Err(Error::TeamConfig {
                    reason: format!(
                        "module `{}` declares {LAUNCH_CTX_SYMBOL} with {bytes} bytes, this runtime expects {}; build \
                         the kernels crate against the same ferrocomm-device as the runtime",
                        module.name(),
                        size_of::<LaunchCtx>()
                    ),
                });
            }
            // A module that never reads its context (no waits, no errors) may have none.
            Err(DriverError(CUresult::CUDA_ERROR_NOT_FOUND)) => {
                tracing::debug!(module = module.name(), "no {LAUNCH_CTX_SYMBOL} in the module");
            }
            Err(e) => return Err(cuda("cuModuleGetGlobal", device)(e)),
        }
        if let Some((ring, capacity)) = ring {
            write_trace_ring(handle, module.name(), [ring, capacity], device)?;
        }
        cache.insert(module.key(), Arc::clone(&loaded));
        Ok(loaded)
    }

    /// Kernel `name` of `module` on `rank`, opened up to `shared_bytes` of dynamic shared memory.
    pub fn function(
        &self,
        rank: usize,
        module: &LoadedModule,
        name: &'static str,
        shared_bytes: u32,
    ) -> Result<sys::CUfunction, Error> {
        let device = Some(self.gpu_of(rank).device());
        let mut functions = module.functions.lock().unwrap_or_else(|p| p.into_inner());
        self.bind(rank)?;
        let entry = match functions.get(name) {
            Some(&entry) => entry,
            None => {
                let cname =
                    CString::new(name).map_err(|_| Error::KernelNotFound { module: module.name, kernel: name })?;
                // SAFETY: the module is loaded in the current context.
                let func = match unsafe { result::module::get_function(module.module, cname) } {
                    Ok(f) => f,
                    Err(DriverError(CUresult::CUDA_ERROR_NOT_FOUND)) => {
                        return Err(Error::KernelNotFound { module: module.name, kernel: name });
                    }
                    Err(e) => return Err(cuda("cuModuleGetFunction", device)(e)),
                };
                (func, DEFAULT_SHARED_LIMIT)
            }
        };
        let (func, mut opened) = entry;
        if shared_bytes > opened {
            // SAFETY: `func` belongs to the loaded module; the value is checked against the device by the driver.
            unsafe {
                result::function::set_function_attribute(
                    func,
                    CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    shared_bytes as i32,
                )
            }
            .map_err(cuda("cuFuncSetAttribute", device))?;
            opened = shared_bytes;
        }
        functions.insert(name, (func, opened));
        Ok(func)
    }
}
