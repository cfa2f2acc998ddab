//! `custom_kernel._native`: the extension module of the `custom_kernel` Python package — the template for shipping
//! one's own `#[kernel]`s (here the `custom-kernel` crate's ring step) to PyTorch and numpy users with
//! `pip install`.
//!
//! The module is a complete `ferrocomm` back end: [`ferrocomm_python::add_classes`] builds ferrocomm's
//! `Session` into it, so `ferrocomm.init(extension=custom_kernel._native)` makes one team that runs ferrocomm's
//! collectives and these kernels alike. Each function below takes that session and the tensor arguments
//! `Session.tensor_arg` made of the caller's tensors, and launches through the typed launchers `#[kernel]`
//! generated: their checks (length relations, symmetric memory, team membership, buffers kept alive until
//! the stream has passed the kernel) hold at the Python boundary as they do in Rust, and fail as ferrocomm's
//! Python exceptions.

use custom_kernel::{MAX_BLOCKS, PAD_SIGNALS};
use ferrocomm::{Backend, LaunchConfig, SignalPadBuffer, Team};
use ferrocomm_python::{Arg, Session};
use pyo3::prelude::*;

/// Threads per block on GPUs: each thread stores one element per grid-stride step.
const GPU_THREADS: u32 = 256;

/// The grid of both kernels for `len` elements. It must be the same on every rank (`scaled_put`'s blocks
/// signal their peers block by block), so callers pass the length of the symmetric inbox: one allocation,
/// equally long on every rank, whatever lengths the ranks' other tensors have.
fn grid(team: &Team, len: usize) -> LaunchConfig {
    match team.backend() {
        // One block per 256 elements up to the pad's data signals; the kernels loop over the rest.
        Backend::Cuda => LaunchConfig::new(len.div_ceil(GPU_THREADS as usize).clamp(1, MAX_BLOCKS) as u32, GPU_THREADS),
        // Every emulated thread is a host thread: two warps exercise the block signals without crowding the CPU.
        Backend::Emulator => LaunchConfig::new(2, 32),
    }
}

/// The signal pad of `scaled_put`, one per session: its signals count launches (epochs kept on the device),
/// so one pad serves every call, back to back or replayed from a CUDA graph, and must not be shared by two
/// ring steps in flight at once.
///
/// Allocating it is collective (symmetric memory): every rank makes its ring at the same point of its
/// program, as the Python layer does on the session's first `scaled_put`.
#[pyclass(frozen, module = "custom_kernel._native")]
#[derive(Debug)]
pub struct Ring {
    pad: SignalPadBuffer,
}

#[pymethods]
impl Ring {
    #[new]
    fn new(py: Python<'_>, session: &Bound<'_, Session>) -> PyResult<Ring> {
        let pad = session.get().with_team(py, |team| SignalPadBuffer::new(team, "custom_kernel.ring", PAD_SIGNALS))?;
        Ok(Ring { pad })
    }
}

/// Every rank stores `scale * src` into the next rank's `inbox` and returns once its own inbox holds its
/// predecessor's values (in stream order on GPUs; waited for on the emulator).
#[pyfunction]
#[pyo3(signature = (session, ring, src, inbox, scale, streams=None))]
fn scaled_put(
    py: Python<'_>,
    session: &Bound<'_, Session>,
    ring: &Bound<'_, Ring>,
    src: Arg,
    inbox: Arg,
    scale: f32,
    streams: Option<Vec<usize>>,
) -> PyResult<()> {
    let pad = &ring.get().pad;
    // What the processes must agree on (`init(check_calls=True)`): ranks that put different lengths would
    // leave part of an inbox stale; a different scale is each rank's own business.
    let call = || format!("custom_kernel.scaled_put of {} into {}", src.numel, inbox.numel);
    session.get().operate_with(py, call, streams, |ops| {
        // Peers store into the inbox: it must be symmetric memory. Checked before `src` is staged so that a
        // refused call queues no copy.
        let mut inbox_buf = ops.symmetric::<f32>(&inbox, "inbox")?;
        // Read on this rank only: any tensor will do, staged when it is not symmetric.
        let src_buf = ops.input::<f32>(&src, "src")?;
        let cfg = grid(ops.team(), inbox.numel);
        custom_kernel::scaled_put::launch(ops.team(), cfg, &src_buf, &mut inbox_buf, pad, scale)?.leave_in_stream();
        Ok(())
    })
}

/// `acc += inbox` on every rank: adds what `scaled_put` delivered into a local sum.
#[pyfunction]
#[pyo3(signature = (session, acc, inbox, streams=None))]
fn accumulate(
    py: Python<'_>,
    session: &Bound<'_, Session>,
    acc: Arg,
    inbox: Arg,
    streams: Option<Vec<usize>>,
) -> PyResult<()> {
    // Purely local, but checked like every call so that a rank that skipped one is caught at the next.
    let call = || format!("custom_kernel.accumulate of {} from {}", acc.numel, inbox.numel);
    session.get().operate_with(py, call, streams, |ops| {
        // `SymSlice` in the kernel: the launcher takes symmetric memory only, though this kernel reads its own part.
        let inbox_buf = ops.symmetric::<f32>(&inbox, "inbox")?;
        // Read and written on this rank only: staged (in and back out) when it is not symmetric.
        let mut acc_buf = ops.output::<f32>(&acc, "acc")?;
        let cfg = grid(ops.team(), inbox.numel);
        custom_kernel::accumulate::launch(ops.team(), cfg, &mut acc_buf, &inbox_buf)?.leave_in_stream();
        Ok(())
    })
}

#[pymodule]
#[pyo3(name = "_native")]
fn custom_kernel_extension(m: &Bound<'_, PyModule>) -> PyResult<()> {
    // ferrocomm's Session (and what its Python layer needs of an extension): the team these kernels share
    // with ferrocomm's collectives.
    ferrocomm_python::add_classes(m)?;
    m.add_class::<Ring>()?;
    m.add_function(wrap_pyfunction!(scaled_put, m)?)?;
    m.add_function(wrap_pyfunction!(accumulate, m)?)?;
    m.add("PAD_SIGNALS", PAD_SIGNALS)?;
    m.add("MAX_BLOCKS", MAX_BLOCKS)?;
    Ok(())
}
