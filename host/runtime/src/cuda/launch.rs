//! Launching on every rank's stream (device limits and co-residency checked first) and capturing those
//! streams into CUDA graphs, one per rank, replayed together.

use std::sync::{Arc, PoisonError};

use cudarc::driver::sys::{self, CUstreamCaptureMode};
use cudarc::driver::{CudaContext, result};

use super::CudaTeam;
use crate::error::{Error, cuda};
use crate::exec::{ExternalStream, Kernel, LaunchConfig, ParamPack, Partial, TeamView};

impl CudaTeam {
    /// Launches `kernel` on every rank: on `streams` (the caller's) when given, else on the ranks' own. If a
    /// rank fails after others were launched, says how many were (the core waits for them: they may use the
    /// memory the caller is about to release). Work on a caller's stream that runs (not `capturing`) is
    /// marked there, so `idle` waits for it.
    pub fn launch_all(
        &self,
        team: &dyn TeamView,
        kernel: &'static Kernel,
        cfg: &LaunchConfig,
        packs: &[ParamPack],
        streams: Option<&[ExternalStream]>,
        capturing: bool,
    ) -> Result<(), Partial> {
        let funcs = (0..self.ranks.len())
            .map(|rank| {
                self.check_limits(rank, kernel, cfg)?;
                let module = self.module(team, rank, kernel.module)?;
                let func = self.function(rank, &module, kernel.name, cfg.shared_bytes)?;
                Ok((func, self.programmatic_launch && kernel.grid_dependency && module.cc >= 90))
            })
            .collect::<Result<Vec<_>, Error>>()?;
        if kernel.waits {
            let only: Vec<sys::CUfunction> = funcs.iter().map(|&(f, _)| f).collect();
            self.check_co_resident(kernel, cfg, &only)?;
        }
        for (rank, (&(func, programmatic), pack)) in funcs.iter().zip(packs).enumerate() {
            let caller = streams.map(|s| &s[rank]);
            let launched = self.launch_rank(rank, func, cfg, pack, programmatic, caller).and_then(|()| match caller {
                Some(stream) if !capturing => self.ranks[rank]
                    .marks
                    .record(stream)
                    .map_err(cuda("cuEventRecord", Some(self.gpu_of(rank).device()))),
                _ => Ok(()),
            });
            if let Err(error) = launched {
                return Err(Partial { queued: rank, error });
            }
        }
        Ok(())
    }

    /// Launches on `rank`'s stream; `programmatic`: with programmatic dependent launch (the kernel's entry
    /// waits for the previous kernel itself, see `ferrocomm_device::sync::wait_prior_grids`).
    fn launch_rank(
        &self,
        rank: usize,
        func: sys::CUfunction,
        cfg: &LaunchConfig,
        pack: &ParamPack,
        programmatic: bool,
        caller: Option<&ExternalStream>,
    ) -> Result<(), Error> {
        self.bind(rank)?;
        let stream = self.target(rank, caller);
        let mut params = pack.pointers();
        let [gx, gy, gz] = cfg.grid;
        let [bx, by, bz] = cfg.block;
        let mut attr = sys::CUlaunchAttribute {
            id: sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
            pad: [0; 4],
            value: sys::CUlaunchAttributeValue { programmaticStreamSerializationAllowed: 1 },
        };
        let config = sys::CUlaunchConfig {
            gridDimX: gx,
            gridDimY: gy,
            gridDimZ: gz,
            blockDimX: bx,
            blockDimY: by,
            blockDimZ: bz,
            sharedMemBytes: cfg.shared_bytes,
            hStream: stream,
            attrs: &raw mut attr,
            numAttrs: u32::from(programmatic),
        };
        // SAFETY: `func` is a kernel of this rank's module, loaded in the current context; `params` points at
        // one ABI value per kernel parameter (the caller's contract of `Team::launch`) and the driver copies
        // them (and the config) before returning; the stream belongs to the current context.
        unsafe { sys::cuLaunchKernelEx(&config, func, params.as_mut_ptr(), std::ptr::null_mut()) }
            .result()
            .map_err(cuda("cuLaunchKernelEx", Some(self.gpu_of(rank).device())))
    }

    fn check_limits(&self, rank: usize, kernel: &'static Kernel, cfg: &LaunchConfig) -> Result<(), Error> {
        let gpu = self.gpu_of(rank);
        let bad = |reason: String| Err(Error::BadLaunchConfig { kernel: kernel.name, reason });
        if cfg.threads_per_block() > gpu.max_threads_per_block {
            return bad(format!(
                "{} threads per block; {} allows {}",
                cfg.threads_per_block(),
                gpu.device(),
                gpu.max_threads_per_block
            ));
        }
        for axis in 0..3 {
            if cfg.block[axis] > gpu.max_block[axis] || cfg.grid[axis] > gpu.max_grid[axis] {
                return bad(format!(
                    "grid {:?} / block {:?} exceed {}'s limits (grid {:?}, block {:?})",
                    cfg.grid,
                    cfg.block,
                    gpu.device(),
                    gpu.max_grid,
                    gpu.max_block
                ));
            }
        }
        if cfg.shared_bytes > gpu.max_shared_optin {
            return bad(format!(
                "{} bytes of dynamic shared memory; {} allows at most {} per block",
                cfg.shared_bytes,
                gpu.device(),
                gpu.max_shared_optin
            ));
        }
        Ok(())
    }

    /// The fewest threads per block `kernel` allows over the ranks (`CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK`,
    /// which its register use bounds).
    pub fn kernel_thread_limit(&self, team: &dyn TeamView, kernel: &'static Kernel) -> Result<u32, Error> {
        let mut fewest = u32::MAX;
        for rank in 0..self.ranks.len() {
            let module = self.module(team, rank, kernel.module)?;
            let func = self.function(rank, &module, kernel.name, 0)?;
            // SAFETY: `func` belongs to a module loaded in the current context (`function` bound it).
            let max = unsafe {
                result::function::get_function_attribute(
                    func,
                    sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
                )
            }
            .map_err(cuda("cuFuncGetAttribute", Some(self.gpu_of(rank).device())))?;
            fewest = fewest.min(max.max(0) as u32);
        }
        Ok(fewest)
    }

    /// A kernel that waits on other blocks or ranks deadlocks unless all of its blocks run at once: on each
    /// GPU, the blocks of every rank sharing it must fit (occupancy × multiprocessors).
    fn check_co_resident(
        &self,
        kernel: &'static Kernel,
        cfg: &LaunchConfig,
        funcs: &[sys::CUfunction],
    ) -> Result<(), Error> {
        for (g, gpu) in self.gpus.iter().enumerate() {
            let ranks: Vec<usize> = (0..self.ranks.len()).filter(|&r| self.ranks[r].gpu == g).collect();
            let Some(&first) = ranks.first() else { continue };
            // The driver's answer depends on the function and the block's shape only: asked once, it is kept
            // (the query costs microseconds, as much as the launch it guards).
            let key = (funcs[first] as usize, cfg.threads_per_block(), cfg.shared_bytes);
            let known = gpu.occupancy.lock().unwrap_or_else(PoisonError::into_inner).get(&key).copied();
            let per_sm = match known {
                Some(per_sm) => per_sm,
                None => {
                    self.bind(first)?;
                    // SAFETY: `funcs[first]` belongs to a module loaded in the current context.
                    let per_sm = unsafe {
                        result::occupancy::max_active_block_per_multiprocessor(
                            funcs[first],
                            cfg.threads_per_block() as i32,
                            cfg.shared_bytes as usize,
                        )
                    }
                    .map_err(cuda("cuOccupancyMaxActiveBlocksPerMultiprocessor", Some(gpu.device())))?;
                    gpu.occupancy.lock().unwrap_or_else(PoisonError::into_inner).insert(key, per_sm);
                    per_sm
                }
            };
            let max = per_sm.max(0) as u64 * u64::from(gpu.multiprocessors);
            let blocks = cfg.blocks() * ranks.len() as u64;
            if blocks > max {
                return Err(Error::NotCoResident {
                    kernel: kernel.name,
                    device: gpu.device(),
                    blocks,
                    ranks: ranks.len(),
                    max,
                    per_rank: max / ranks.len() as u64,
                });
            }
        }
        Ok(())
    }

    /// Starts capturing every rank's stream. On failure, the streams already capturing are ended.
    pub fn begin_stream_capture(&self) -> Result<(), Error> {
        for rank in 0..self.ranks.len() {
            let r = self.bind(rank)?;
            // Relaxed: module loads and synchronous copies of other threads stay legal during the capture.
            // SAFETY: the stream belongs to the current context.
            let began = unsafe {
                result::stream::begin_capture(r.stream.cu_stream(), CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED)
            };
            if let Err(e) = began {
                for earlier in 0..rank {
                    let _ = self.end_rank_capture(earlier);
                }
                return Err(cuda("cuStreamBeginCapture", Some(self.gpu_of(rank).device()))(e));
            }
        }
        Ok(())
    }

    fn end_rank_capture(&self, rank: usize) -> Result<sys::CUgraph, Error> {
        let r = self.bind(rank)?;
        // SAFETY: the stream is capturing (begun by `begin_capture`) in the current context.
        unsafe { result::stream::end_capture(r.stream.cu_stream()) }
            .map_err(cuda("cuStreamEndCapture", Some(self.gpu_of(rank).device())))
    }

    /// Ends every rank's capture and instantiates each rank's graph. Every stream's capture is ended even
    /// when one fails, so the streams are usable again.
    pub fn end_stream_capture(&self, keep: bool) -> Result<Vec<RankGraph>, Error> {
        let mut graphs = Vec::with_capacity(self.ranks.len());
        let mut failure = None;
        for rank in 0..self.ranks.len() {
            let device = Some(self.gpu_of(rank).device());
            let made = self.end_rank_capture(rank).and_then(|graph| {
                let exec = if keep && failure.is_none() {
                    // SAFETY: `graph` was just captured in the current context.
                    unsafe { result::graph::instantiate(graph, sys::CUgraphInstantiate_flags(0)) }
                        .map(Some)
                        .map_err(cuda("cuGraphInstantiate", device))
                } else {
                    Ok(None)
                };
                // SAFETY: the executable graph (if any) no longer needs the template.
                let _ = unsafe { result::graph::destroy(graph) };
                exec
            });
            match made {
                Ok(Some(exec)) => graphs.push(RankGraph { ctx: Arc::clone(&self.gpu_of(rank).ctx), exec }),
                Ok(None) => {}
                Err(e) => {
                    failure.get_or_insert(e);
                }
            }
        }
        match failure {
            Some(e) => Err(e),
            None => Ok(graphs),
        }
    }

    /// Launches each rank's graph on its stream; on a failure, says how many ranks' graphs were launched.
    pub fn launch_graphs(&self, graphs: &[RankGraph]) -> Result<(), Partial> {
        for (rank, graph) in graphs.iter().enumerate() {
            let r = self.bind(rank).map_err(|error| Partial { queued: rank, error })?;
            // SAFETY: `graph.exec` was instantiated in this rank's context; the stream belongs to it.
            if let Err(e) = unsafe { result::graph::launch(graph.exec, r.stream.cu_stream()) } {
                let error = cuda("cuGraphLaunch", Some(self.gpu_of(rank).device()))(e);
                return Err(Partial { queued: rank, error });
            }
        }
        Ok(())
    }
}

/// One rank's executable graph.
#[derive(Debug)]
pub(crate) struct RankGraph {
    ctx: Arc<CudaContext>,
    exec: sys::CUgraphExec,
}

// SAFETY: an executable graph handle may be launched and destroyed from any thread with its context current
// (every use binds it).
unsafe impl Send for RankGraph {}
// SAFETY: as above.
unsafe impl Sync for RankGraph {}

impl Drop for RankGraph {
    fn drop(&mut self) {
        if self.ctx.bind_to_thread().is_ok() {
            // SAFETY: instantiated by `end_capture`; the graph's owner has waited for its replays.
            let _ = unsafe { result::graph::exec_destroy(self.exec) };
        }
    }
}
