//! [`Session`]: a team, its communicator and the symmetric memory the Python layer hands out, and the
//! collectives on tensors the caller owns.
//!
//! A tensor argument reaches a kernel in one of two ways. A whole tensor of `ferrocomm.empty` (symmetric
//! memory, found in the session's registry by its address on every local rank) is used in place. Any other
//! tensor is copied into a symmetric staging buffer before the kernel and out of it after, in the order of
//! the caller's stream (see `ferrocomm::memory::CallerMemory`), so the call is captured whole by
//! `torch.cuda.graph` and never waits on the host.

use std::mem::{ManuallyDrop, size_of};
use std::sync::{Mutex, PoisonError};

use ferrocomm::{Backend, CallerMemory, DeviceCopy, Error, ExternalStream, SymBuffer, Team, WeakSymBuffer};
use ferrocomm_bootstrap::JobEnv;
use ferrocomm_device::{bf16, f16};
use ferrocomm_kernels::{CommError, Communicator, Op, Reducible, TpDecode, TpShape, TpVariant};
use pyo3::prelude::*;

use crate::dlpack::{DlpackExport, Dtype, dl_device};
use crate::errors;

/// Default bytes of each staging buffer: enough for the messages of a decode step on GPUs, small on the
/// emulator, whose ranks' memory is this process's.
const GPU_STAGING_BYTES: usize = 64 << 20;
const EMULATOR_STAGING_BYTES: usize = 4 << 20;

/// A tensor argument as Python passes it, `(addresses, numel)`: its address on each local rank (in
/// `Team::local_ranks` order) and its number of elements.
#[derive(Debug, Clone)]
pub struct Arg {
    pub addrs: Vec<u64>,
    pub numel: usize,
}

impl<'py> FromPyObject<'_, 'py> for Arg {
    type Error = PyErr;

    fn extract(object: Borrowed<'_, 'py, PyAny>) -> PyResult<Self> {
        let (addrs, numel) = object.extract::<(Vec<u64>, usize)>()?;
        Ok(Arg { addrs, numel })
    }
}

/// Where an argument lives, as the kernels need to know.
pub(crate) enum Place {
    /// Symmetric memory of this session, used in place.
    Symmetric(SymBuffer<u8>),
    /// The caller's memory, one part per local rank: copied through a staging buffer.
    Caller(Vec<CallerMemory>),
}

/// The team, its communicator and what the Python layer allocated with it. Field order is drop order:
/// the communicator borrows the team.
pub(crate) struct Inner {
    comm: ManuallyDrop<Communicator<'static>>,
    /// Two staging buffers: an argument copied in, and a result copied out.
    staging: [SymBuffer<u8>; 2],
    /// All-to-all's per-destination row counts (one row each) and the received counts.
    send_counts: SymBuffer<u32>,
    recv_counts: SymBuffer<u32>,
    /// Symmetric memory handed to Python, found again by address; dead entries are pruned when searched.
    registry: Vec<WeakSymBuffer<u8>>,
    /// Whether every call first checks that the processes agree on it (`check_calls`).
    check_calls: bool,
    /// The tensor-parallel decode steps made so far, one per shape: their plans, buffers and pads, and
    /// symmetric copies of their small operands.
    decoders: Vec<Decoder>,
    team: ManuallyDrop<Box<Team>>,
}

// SAFETY: `comm` borrows `team`, which is boxed (its address never moves) and dropped after it.
impl Drop for Inner {
    fn drop(&mut self) {
        // SAFETY: dropped once, communicator first; nothing else refers to the team afterwards.
        unsafe {
            ManuallyDrop::drop(&mut self.comm);
            ManuallyDrop::drop(&mut self.team);
        }
    }
}

/// One process's ferrocomm: a team (every GPU of the process, one rank of a job, or the emulator).
#[pyclass(frozen, module = "ferrocomm._C")]
pub struct Session {
    inner: Mutex<Option<Inner>>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        f.debug_struct("Session").field("team", &inner.as_ref().map(|i| i.team().id())).finish()
    }
}

impl Session {
    pub(crate) fn with<R>(&self, py: Python<'_>, f: impl FnOnce(&mut Inner) -> PyResult<R>) -> PyResult<R> {
        let mut guard = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        match guard.as_mut() {
            Some(inner) => f(inner),
            None => Err(errors::raise(
                py,
                "ConfigError",
                "the session was closed; call ferrocomm.init() again".into(),
                None,
                None,
            )),
        }
    }

    /// Runs one operation: reports the device errors of earlier ones, binds the caller's streams, runs
    /// `op`, and waits for it when there are no streams to order it.
    pub(crate) fn operate(
        &self,
        py: Python<'_>,
        call: impl FnOnce() -> String,
        streams: Option<Vec<usize>>,
        op: impl FnOnce(&mut Inner) -> Result<(), CommError>,
    ) -> PyResult<()> {
        self.with(py, |inner| {
            let team: &'static Team = inner.team();
            team.check_errors().map_err(|e| errors::runtime(py, e))?;
            if inner.check_calls {
                // Ranks that called different collectives, or with different sizes, would wait on each other
                // until the device timeout, or pair the wrong data: say so at once instead.
                let call = call();
                py.detach(|| team.agree("a collective call", &call)).map_err(|e| errors::runtime(py, e))?;
            }
            // Without the caller's streams to order it (numpy on the emulator), the call waits for its result.
            let wait = streams.is_none();
            let binding = match streams {
                // SAFETY: torch's (or the caller's) streams, alive while torch runs work on them.
                Some(streams) => Some(
                    team.bind_streams(
                        streams.into_iter().map(|s| unsafe { ExternalStream::from_raw(s as _) }).collect(),
                    )
                    .map_err(|e| errors::runtime(py, e))?,
                ),
                None => None,
            };
            op(inner).map_err(|e| errors::comm(py, e))?;
            drop(binding);
            if wait {
                py.detach(|| team.synchronize()).map_err(|e| errors::runtime(py, e))?;
            }
            Ok(())
        })
    }
}

/// A tensor-parallel decode step of one shape, and where its operands go when they are not symmetric.
struct Decoder {
    shape: TpShape,
    step: TpDecode,
    x: SymBuffer<bf16>,
    residual: SymBuffer<bf16>,
    gamma: SymBuffer<bf16>,
    out: SymBuffer<bf16>,
}

impl Inner {
    /// The team, for as long as the session lives.
    pub(crate) fn team(&self) -> &'static Team {
        // SAFETY: boxed, so its address is stable, and dropped only with `Inner`, after every use made
        // through a session method (which holds the session's lock).
        unsafe { &*(&**self.team as *const Team) }
    }

    /// Where an argument lives: a registered symmetric allocation whose part on every local rank starts
    /// at the argument's address and holds it, or the caller's memory.
    pub(crate) fn place(&mut self, arg: &Arg, elem_bytes: usize, argument: &str) -> Result<Place, CommError> {
        let team = self.team();
        let local = team.local_ranks();
        if arg.addrs.len() != local.len() {
            return Err(Error::TeamConfig {
                reason: format!(
                    "argument `{argument}` has {} tensor(s) for {} local rank(s); pass one per rank of this process",
                    arg.addrs.len(),
                    local.len()
                ),
            }
            .into());
        }
        let bytes = arg.numel * elem_bytes;
        // One pass: dead entries are pruned while the live ones are searched.
        let mut found = None;
        self.registry.retain(|weak| {
            let Some(buf) = weak.upgrade() else { return false };
            let whole = local.iter().zip(&arg.addrs).all(|(&r, &a)| buf.address(r).is_ok_and(|base| base == a));
            if found.is_none() && whole && bytes <= buf.len() {
                found = Some(buf);
            }
            true
        });
        if let Some(buf) = found {
            return Ok(Place::Symmetric(buf));
        }
        let parts = local
            .iter()
            .zip(&arg.addrs)
            // SAFETY: the Python layer passes the storage of a live tensor it holds for the call; work queued
            // on it runs in the caller's stream order, where torch keeps the storage alive.
            .map(|(&rank, &addr)| unsafe { team.caller_memory(rank, addr, bytes) })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Place::Caller(parts))
    }

    /// Where a call's `input` and `output` live.
    fn in_out(&mut self, input: &Arg, output: &Arg, dtype: Dtype) -> Result<(Place, Place), CommError> {
        Ok((self.place(input, dtype.bytes(), "input")?, self.place(output, dtype.bytes(), "output")?))
    }

    /// A symmetric buffer holding `bytes` of an argument while a kernel runs: the argument itself when it is
    /// symmetric, else staging buffer `which`, filled from the argument first when `fill` says so.
    pub(crate) fn hold(
        &mut self,
        place: &Place,
        bytes: usize,
        which: usize,
        fill: bool,
    ) -> Result<SymBuffer<u8>, CommError> {
        match place {
            // SAFETY: a view of the caller's symmetric tensor, used by this call's kernel only.
            Place::Symmetric(buf) => Ok(unsafe { buf.alias::<u8>(bytes) }?),
            Place::Caller(parts) => {
                let capacity = self.staging[which].len();
                if bytes > capacity {
                    return Err(CommError::TooLarge {
                        what: "a tensor that is not symmetric memory (copied through the staging buffer)",
                        bytes,
                        max: capacity,
                        fix: "allocate it with ferrocomm.empty (used in place), or init(staging_bytes=...) larger",
                    });
                }
                // SAFETY: the staging buffers are used by one call at a time (the session's lock), in stream order.
                let mut stage = unsafe { self.staging[which].alias::<u8>(bytes) }?;
                if fill {
                    for part in parts {
                        stage.copy_from_caller(part)?.leave_in_stream();
                    }
                }
                Ok(stage)
            }
        }
    }

    /// Copies `held` back to the caller's memory of `place` (nothing when it is the symmetric argument).
    pub(crate) fn give_back(&self, held: &SymBuffer<u8>, place: &Place) -> Result<(), CommError> {
        if let Place::Caller(parts) = place {
            for part in parts {
                held.copy_to_caller(part)?.leave_in_stream();
            }
        }
        Ok(())
    }

    /// Copies `src`'s tensor into `dst`, a buffer that holds another argument, unless they are the same memory.
    fn copy_between(&self, src: &Place, dst: &mut SymBuffer<u8>, bytes: usize) -> Result<(), CommError> {
        let team = self.team();
        for (slot, rank) in team.local_ranks().into_iter().enumerate() {
            let from = match src {
                Place::Symmetric(buf) => buf.address(rank)?,
                Place::Caller(parts) => parts[slot].address(),
            };
            if from == dst.address(rank)? {
                continue;
            }
            // SAFETY: `from` is a live tensor of this call (symmetric or the caller's).
            let part = unsafe { team.caller_memory(rank, from, bytes) }?;
            dst.copy_from_caller(&part)?.leave_in_stream();
        }
        Ok(())
    }

    fn all_reduce<T: Reducible>(
        &mut self,
        input: &Place,
        output: &Place,
        numel: usize,
        op: Op,
    ) -> Result<(), CommError> {
        let bytes = numel * size_of::<T>();
        let mut work = self.hold(output, bytes, 0, false)?;
        self.copy_between(input, &mut work, bytes)?;
        // SAFETY: `work` holds `numel` elements of `T`; the only other alias is idle until this call's copies.
        let mut typed = unsafe { work.alias::<T>(numel) }?;
        self.comm.all_reduce(&mut typed, op)?.leave_in_stream();
        self.give_back(&work, output)
    }

    fn all_gather<T: DeviceCopy>(&mut self, input: &Place, output: &Place, numel: usize) -> Result<(), CommError> {
        let world = self.team().world();
        let src = self.hold(input, numel * size_of::<T>(), 0, true)?;
        let dst = self.hold(output, world * numel * size_of::<T>(), 1, false)?;
        // SAFETY: typed views of this call's two held buffers, used by its kernel only.
        let (src_t, mut dst_t) = unsafe { (src.alias::<T>(numel)?, dst.alias::<T>(world * numel)?) };
        self.comm.all_gather(&src_t, &mut dst_t)?.leave_in_stream();
        self.give_back(&dst, output)
    }

    fn reduce_scatter<T: Reducible>(
        &mut self,
        input: &Place,
        output: &Place,
        numel: usize,
        op: Op,
    ) -> Result<(), CommError> {
        let world = self.team().world();
        let src = self.hold(input, world * numel * size_of::<T>(), 0, true)?;
        let dst = self.hold(output, numel * size_of::<T>(), 1, false)?;
        // SAFETY: as in `all_gather`.
        let (src_t, mut dst_t) = unsafe { (src.alias::<T>(world * numel)?, dst.alias::<T>(numel)?) };
        self.comm.reduce_scatter(&src_t, &mut dst_t, op)?.leave_in_stream();
        self.give_back(&dst, output)
    }

    fn all_to_all<T: DeviceCopy>(&mut self, input: &Place, output: &Place, numel: usize) -> Result<(), CommError> {
        let world = self.team().world();
        let row = numel / world;
        let src = self.hold(input, numel * size_of::<T>(), 0, true)?;
        let dst = self.hold(output, numel * size_of::<T>(), 1, false)?;
        // SAFETY: as in `all_gather`.
        let (src_t, mut dst_t) = unsafe { (src.alias::<T>(numel)?, dst.alias::<T>(numel)?) };
        // One row of `numel / world` elements to each destination, received into slot `source`.
        self.comm.all_to_all(&src_t, &self.send_counts, &mut dst_t, &mut self.recv_counts, row, 1)?.leave_in_stream();
        self.give_back(&dst, output)
    }

    /// One decode step of `shape`: `out = rmsnorm(Σ_ranks x·w + residual) * gamma` (see `TpDecode::step`).
    /// The weights are used in place and must be symmetric memory (copying them would cost more than the
    /// step); the other operands are copied into the step's own symmetric buffers when they are not.
    /// The step's buffers are made at its shape's first call, which must not be inside a capture.
    #[allow(clippy::too_many_arguments)]
    fn tp_decode(
        &mut self,
        shape: TpShape,
        variant: TpVariant,
        capturing: bool,
        [x, w, residual, gamma, out]: [&Arg; 5],
    ) -> Result<(), CommError> {
        let team = self.team();
        let at = match self.decoders.iter().position(|d| d.shape == shape) {
            Some(at) => at,
            None if capturing => {
                return Err(Error::Capturing {
                    what: "a decode step's first call of its shape (it allocates); call it once before capturing",
                }
                .into());
            }
            None => {
                let step = TpDecode::new(&self.comm, shape)?;
                let world = team.world();
                self.decoders.push(Decoder {
                    shape,
                    step,
                    x: SymBuffer::new(team, shape.tokens * shape.k_local(world))?,
                    residual: SymBuffer::new(team, shape.tokens * shape.hidden)?,
                    gamma: SymBuffer::new(team, shape.hidden)?,
                    out: SymBuffer::new(team, shape.tokens * shape.hidden)?,
                });
                self.decoders.len() - 1
            }
        };
        let elem = size_of::<bf16>();
        let weights = match self.place(w, elem, "w")? {
            // SAFETY: a typed view of the caller's symmetric weights, read by this call's kernels.
            Place::Symmetric(buf) => unsafe { buf.alias::<bf16>(w.numel) }?,
            Place::Caller(_) => {
                return Err(Error::SymmetricRequired {
                    argument: "w".into(),
                    found: "it is ordinary memory, which the step would copy whole each call; allocate the weights \
                            once with ferrocomm.empty"
                        .into(),
                }
                .into());
            }
        };
        let places = [self.place(x, elem, "x")?, self.place(residual, elem, "residual")?];
        let (gamma_place, out_place) = (self.place(gamma, elem, "gamma")?, self.place(out, elem, "out")?);
        let d = &mut self.decoders[at];
        let operand = |place: &Place, own: &mut SymBuffer<bf16>, numel: usize| -> Result<SymBuffer<bf16>, CommError> {
            match place {
                // SAFETY: a typed view of the caller's symmetric tensor, read by this call's kernels.
                Place::Symmetric(buf) => Ok(unsafe { buf.alias::<bf16>(numel) }?),
                Place::Caller(parts) => {
                    for part in parts {
                        own.copy_from_caller(part)?.leave_in_stream();
                    }
                    // SAFETY: the step's own buffer, used by this call only.
                    Ok(unsafe { own.alias::<bf16>(numel) }?)
                }
            }
        };
        let xs = operand(&places[0], &mut d.x, x.numel)?;
        let res = operand(&places[1], &mut d.residual, residual.numel)?;
        let gam = operand(&gamma_place, &mut d.gamma, gamma.numel)?;
        let mut o = match &out_place {
            // SAFETY: a typed view of the caller's symmetric output, written by this call's kernels.
            Place::Symmetric(buf) => unsafe { buf.alias::<bf16>(out.numel) }?,
            // SAFETY: the step's own output buffer, copied to the caller's below.
            Place::Caller(_) => unsafe { d.out.alias::<bf16>(out.numel) }?,
        };
        d.step.step(&mut self.comm, variant, &xs, &weights, &res, &gam, &mut o)?;
        if let Place::Caller(parts) = &out_place {
            for part in parts {
                o.copy_to_caller(part)?.leave_in_stream();
            }
        }
        Ok(())
    }

    fn broadcast<T: DeviceCopy>(&mut self, tensor: &Place, numel: usize, root: usize) -> Result<(), CommError> {
        let work = self.hold(tensor, numel * size_of::<T>(), 0, true)?;
        // SAFETY: a typed view of this call's held buffer.
        let mut typed = unsafe { work.alias::<T>(numel) }?;
        self.comm.broadcast(&mut typed, root)?.leave_in_stream();
        self.give_back(&work, tensor)
    }
}

/// Dispatches `$f::<T>` on a dtype: every collective exists for f32, f16 and bf16.
macro_rules! typed {
    ($dtype:expr, $inner:ident . $f:ident ( $($arg:expr),* )) => {
        match $dtype {
            Dtype::F32 => $inner.$f::<f32>($($arg),*),
            Dtype::F16 => $inner.$f::<f16>($($arg),*),
            Dtype::Bf16 => $inner.$f::<bf16>($($arg),*),
        }
    };
}

fn parse_op(py: Python<'_>, op: &str) -> PyResult<Op> {
    match op {
        "sum" => Ok(Op::Sum),
        "max" => Ok(Op::Max),
        "min" => Ok(Op::Min),
        other => Err(errors::input(
            py,
            "RequirementError",
            "op",
            format!("{other:?} is not one of \"sum\", \"max\", \"min\""),
        )),
    }
}

fn parse_dtype(py: Python<'_>, dtype: &str) -> PyResult<Dtype> {
    Dtype::parse(dtype).ok_or_else(|| {
        errors::input(py, "RequirementError", "dtype", format!("{dtype} is not one of float32, float16, bfloat16"))
    })
}

#[pymethods]
impl Session {
    /// A session: the team a launcher's variables (`env`, when given: torch.distributed's rank and world
    /// among them) or this process's GPUs describe, or an emulated team of `world` ranks.
    #[new]
    #[pyo3(signature = (*, env=None, backend=None, world=None, staging_bytes=None, check_calls=false))]
    fn new(
        py: Python<'_>,
        env: Option<std::collections::HashMap<String, String>>,
        backend: Option<&str>,
        world: Option<usize>,
        staging_bytes: Option<usize>,
        check_calls: bool,
    ) -> PyResult<Session> {
        let mut builder = Team::builder();
        match backend {
            Some("cuda") => builder = builder.backend(Backend::Cuda),
            Some("emulator") => builder = builder.backend(Backend::Emulator),
            Some(other) => {
                return Err(errors::input(
                    py,
                    "ConfigError",
                    "backend",
                    format!("{other:?} is not \"cuda\" or \"emulator\""),
                ));
            }
            None => {}
        }
        if let Some(world) = world {
            builder = builder.world(world);
        }
        if let Some(vars) = &env {
            match JobEnv::from_lookup(|k| vars.get(k).cloned()) {
                Ok(Some(job)) => builder = builder.job(job),
                Ok(None) => builder = builder.single_process(),
                Err(e) => return Err(errors::runtime(py, e.into())),
            }
        }
        let team = Box::new(py.detach(|| builder.build()).map_err(|e| errors::runtime(py, e))?);
        // SAFETY: see `Inner::team`: the box outlives the communicator, which `Inner` drops first.
        let team_ref: &'static Team = unsafe { &*(&*team as *const Team) };
        let staging_bytes = staging_bytes.unwrap_or(match team.backend() {
            Backend::Cuda => GPU_STAGING_BYTES,
            Backend::Emulator => EMULATOR_STAGING_BYTES,
        });
        let made = (|| -> Result<Inner, CommError> {
            let mut comm = Communicator::new(team_ref)?;
            // A first barrier loads the collectives' module on every rank (and, across processes, agrees on
            // it), so that no call made later inside the caller's graph capture has to.
            comm.barrier()?.wait()?;
            let staging = [SymBuffer::new(team_ref, staging_bytes)?, SymBuffer::new(team_ref, staging_bytes)?];
            let mut send_counts = SymBuffer::new(team_ref, team_ref.world())?;
            send_counts.fill(1)?;
            let recv_counts = SymBuffer::new(team_ref, team_ref.world())?;
            Ok(Inner {
                comm: ManuallyDrop::new(comm),
                staging,
                send_counts,
                recv_counts,
                registry: Vec::new(),
                check_calls,
                decoders: Vec::new(),
                team: ManuallyDrop::new(team),
            })
        })();
        let inner = made.map_err(|e| errors::comm(py, e))?;
        Ok(Session { inner: Mutex::new(Some(inner)) })
    }

    /// Ranks in the team.
    #[getter]
    fn world(&self, py: Python<'_>) -> PyResult<usize> {
        self.with(py, |i| Ok(i.team().world()))
    }

    /// The ranks this process runs.
    #[getter]
    fn local_ranks(&self, py: Python<'_>) -> PyResult<Vec<usize>> {
        self.with(py, |i| Ok(i.team().local_ranks()))
    }

    /// `"cuda"` or `"emulator"`.
    #[getter]
    fn backend(&self, py: Python<'_>) -> PyResult<&'static str> {
        self.with(py, |i| Ok(i.team().backend().name()))
    }

    /// Whether the team's ranks live in several processes.
    #[getter]
    fn spans_processes(&self, py: Python<'_>) -> PyResult<bool> {
        self.with(py, |i| Ok(i.team().spans_processes()))
    }

    /// Each local rank's device as DLPack names it: `(2, ordinal)` for a CUDA GPU, `(1, 0)` for the CPU.
    #[getter]
    fn devices(&self, py: Python<'_>) -> PyResult<Vec<(u32, i32)>> {
        self.with(py, |i| {
            let team = i.team();
            team.local_ranks()
                .into_iter()
                .map(|r| {
                    team.device(r).map(|d| {
                        let dl = dl_device(d);
                        (dl.device_type.0, dl.device_id)
                    })
                })
                .collect::<Result<_, _>>()
                .map_err(|e| errors::runtime(py, e))
        })
    }

    /// Whether every call first checks that the processes agree on it.
    #[getter]
    fn check_calls(&self, py: Python<'_>) -> PyResult<bool> {
        self.with(py, |i| Ok(i.check_calls))
    }

    /// Bytes of each staging buffer: the largest tensor that is not symmetric memory a call takes.
    #[getter]
    fn staging_bytes(&self, py: Python<'_>) -> PyResult<usize> {
        self.with(py, |i| Ok(i.staging[0].len()))
    }

    /// A zeroed symmetric allocation of `nbytes` per rank (collective: every rank allocates the same sizes
    /// in the same order), exported per local rank as tensors of `shape` and `dtype`.
    fn alloc(&self, py: Python<'_>, nbytes: usize, shape: Vec<i64>, dtype: &str) -> PyResult<Vec<DlpackExport>> {
        let dtype = parse_dtype(py, dtype)?;
        self.with(py, |inner| {
            let team = inner.team();
            let buf = py.detach(|| SymBuffer::<u8>::new(team, nbytes)).map_err(|e| errors::runtime(py, e))?;
            inner.registry.push(buf.downgrade());
            team.local_ranks().into_iter().map(|rank| DlpackExport::new(py, &buf, rank, shape.clone(), dtype)).collect()
        })
    }

    /// All-reduce with `op`: `output` (one tensor per local rank) receives the reduction of every rank's
    /// `input`; in place when they are the same tensor.
    #[pyo3(signature = (input, output, dtype, op, streams=None))]
    fn all_reduce(
        &self,
        py: Python<'_>,
        input: Arg,
        output: Arg,
        dtype: &str,
        op: &str,
        streams: Option<Vec<usize>>,
    ) -> PyResult<()> {
        let (dtype, op) = (parse_dtype(py, dtype)?, parse_op(py, op)?);
        check_numel(py, "output", output.numel, input.numel)?;
        let numel = input.numel;
        let call = move || format!("all_reduce({op:?}) of {} {dtype:?}", numel);
        self.operate(py, call, streams, move |inner| {
            let (i, o) = inner.in_out(&input, &output, dtype)?;
            typed!(dtype, inner.all_reduce(&i, &o, input.numel, op))
        })
    }

    /// All-gather: rank `r`'s `input` (n elements) lands at `r * n` in every rank's `output` (world × n).
    #[pyo3(signature = (input, output, dtype, streams=None))]
    fn all_gather(
        &self,
        py: Python<'_>,
        input: Arg,
        output: Arg,
        dtype: &str,
        streams: Option<Vec<usize>>,
    ) -> PyResult<()> {
        let dtype = parse_dtype(py, dtype)?;
        let world = self.world(py)?;
        check_numel(py, "output", output.numel, world * input.numel)?;
        let numel = input.numel;
        let call = move || format!("all_gather of {} {dtype:?}", numel);
        self.operate(py, call, streams, move |inner| {
            let (i, o) = inner.in_out(&input, &output, dtype)?;
            typed!(dtype, inner.all_gather(&i, &o, input.numel))
        })
    }

    /// Reduce-scatter with `op`: rank `r`'s `output` (n elements) receives chunk `r` of the reduction of every
    /// rank's `input` (world × n).
    #[pyo3(signature = (input, output, dtype, op, streams=None))]
    fn reduce_scatter(
        &self,
        py: Python<'_>,
        input: Arg,
        output: Arg,
        dtype: &str,
        op: &str,
        streams: Option<Vec<usize>>,
    ) -> PyResult<()> {
        let (dtype, op) = (parse_dtype(py, dtype)?, parse_op(py, op)?);
        let world = self.world(py)?;
        check_numel(py, "input", input.numel, world * output.numel)?;
        let numel = input.numel;
        let call = move || format!("reduce_scatter({op:?}) of {} {dtype:?}", numel);
        self.operate(py, call, streams, move |inner| {
            let (i, o) = inner.in_out(&input, &output, dtype)?;
            typed!(dtype, inner.reduce_scatter(&i, &o, output.numel, op))
        })
    }

    /// All-to-all with equal splits: chunk `q` of rank `r`'s `input` (world × n) lands in chunk `r` of rank
    /// `q`'s `output`.
    #[pyo3(signature = (input, output, dtype, streams=None))]
    fn all_to_all(
        &self,
        py: Python<'_>,
        input: Arg,
        output: Arg,
        dtype: &str,
        streams: Option<Vec<usize>>,
    ) -> PyResult<()> {
        let dtype = parse_dtype(py, dtype)?;
        let world = self.world(py)?;
        check_numel(py, "output", output.numel, input.numel)?;
        if !input.numel.is_multiple_of(world) {
            return Err(errors::input(
                py,
                "RequirementError",
                "input",
                format!("{} elements do not split into {world} equal chunks", input.numel),
            ));
        }
        let numel = input.numel;
        let call = move || format!("all_to_all of {} {dtype:?}", numel);
        self.operate(py, call, streams, move |inner| {
            let (i, o) = inner.in_out(&input, &output, dtype)?;
            typed!(dtype, inner.all_to_all(&i, &o, input.numel))
        })
    }

    /// Broadcast: `root`'s `tensor` lands in every rank's.
    #[pyo3(signature = (tensor, dtype, root, streams=None))]
    fn broadcast(
        &self,
        py: Python<'_>,
        tensor: Arg,
        dtype: &str,
        root: usize,
        streams: Option<Vec<usize>>,
    ) -> PyResult<()> {
        let dtype = parse_dtype(py, dtype)?;
        let numel = tensor.numel;
        let call = move || format!("broadcast(root {root}) of {} {dtype:?}", numel);
        self.operate(py, call, streams, move |inner| {
            let t = inner.place(&tensor, dtype.bytes(), "tensor")?;
            typed!(dtype, inner.broadcast(&t, tensor.numel, root))
        })
    }

    /// The tensor-parallel decode step: `out` (`tokens x hidden`) = RMSNorm of the sum over the ranks of
    /// `x · w` (`x`: this rank's `tokens x k/world` shard, `w`: its `k/world x hidden` rows) plus `residual`,
    /// times `gamma` (`hidden`), the same on every rank, in bfloat16. `variant`: `"fused"` (one kernel),
    /// `"two_kernels"` or `"three_kernels"`. `capturing`: whether the caller's stream is capturing (then the
    /// shape's buffers must exist from an earlier call).
    #[pyo3(signature = (x, w, residual, gamma, out, tokens, hidden, variant, capturing=false, streams=None))]
    #[allow(clippy::too_many_arguments)]
    fn tp_decode(
        &self,
        py: Python<'_>,
        x: Arg,
        w: Arg,
        residual: Arg,
        gamma: Arg,
        out: Arg,
        tokens: usize,
        hidden: usize,
        variant: &str,
        capturing: bool,
        streams: Option<Vec<usize>>,
    ) -> PyResult<()> {
        let variant = match variant {
            "fused" => TpVariant::Fused,
            "two_kernels" => TpVariant::TwoKernels,
            "three_kernels" => TpVariant::ThreeKernels,
            other => {
                let why = format!("{other:?} is not \"fused\", \"two_kernels\" or \"three_kernels\"");
                return Err(errors::input(py, "RequirementError", "variant", why));
            }
        };
        let world = self.world(py)?;
        let k_local = x.numel.checked_div(tokens).unwrap_or(0);
        let shape = TpShape { tokens, hidden, k: k_local * world };
        for (argument, found, expected) in [
            ("x", x.numel, tokens * k_local),
            ("w", w.numel, k_local * hidden),
            ("residual", residual.numel, tokens * hidden),
            ("gamma", gamma.numel, hidden),
            ("out", out.numel, tokens * hidden),
        ] {
            check_numel(py, argument, found, expected)?;
        }
        let call = move || format!("tp_decode of {shape:?}");
        self.operate(py, call, streams, move |inner| {
            inner.tp_decode(shape, variant, capturing, [&x, &w, &residual, &gamma, &out])
        })
    }

    /// A barrier across every rank, in the streams' order.
    #[pyo3(signature = (streams=None))]
    fn barrier(&self, py: Python<'_>, streams: Option<Vec<usize>>) -> PyResult<()> {
        self.operate(py, || "barrier".to_owned(), streams, |inner| inner.comm.barrier().map(|g| g.leave_in_stream()))
    }

    /// Waits for every launch of the team (on its streams and the caller's) and reports their device errors.
    fn synchronize(&self, py: Python<'_>) -> PyResult<()> {
        self.with(py, |inner| {
            let team = inner.team();
            py.detach(|| team.synchronize()).map_err(|e| errors::runtime(py, e))
        })
    }

    /// Reports the device errors of finished launches without waiting when there are none.
    fn check_errors(&self, py: Python<'_>) -> PyResult<()> {
        self.with(py, |inner| inner.team().check_errors().map_err(|e| errors::runtime(py, e)))
    }

    /// Ends the session: waits for its work and frees the team (tensors still alive keep their memory).
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner).take();
        if let Some(inner) = inner {
            let team = inner.team();
            let waited = py.detach(|| team.synchronize());
            py.detach(|| drop(inner));
            waited.map_err(|e| errors::runtime(py, e))?;
        }
        Ok(())
    }
}

fn check_numel(py: Python<'_>, argument: &str, found: usize, expected: usize) -> PyResult<()> {
    if found == expected {
        Ok(())
    } else {
        Err(errors::input(
            py,
            "RequirementError",
            argument,
            format!("has {found} elements; this call needs {expected}"),
        ))
    }
}
