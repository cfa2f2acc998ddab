//! The `gpu` mode: GPU-initiated communication with ferrocomm's library (`ferrocomm-kernels`).
//!
//! - ping-pong up to [`PING_MAX_BYTES`]: the library's ping-pong kernel, every round trip inside one
//!   launch, timed by the kernel with `%globaltimer` — put + `st.release.sys` flag / `ld.acquire.sys` poll
//!   for the `gpu` series, LL packets (data and flag in one 16-byte store) for `gpu-ll`;
//! - everything else (ping-pong above that size as a put 0 → 1 then a put 1 → 0, put 0 → 1, all-reduce,
//!   all-gather, all-to-all with one row per destination): the trial's calls captured into one CUDA graph
//!   between two clock stamps ([`Stamps`]) and timed on the device as the graph replays (with `--no-graph`,
//!   launched one by one with a host wait after each, between the same stamps).
//!
//! - `gpu-procs` ([`Variant::Procs`]): the collectives of the `gpu` series, timed the same way, in a team
//!   that spans processes (one rank per process, started by a launcher): every process runs the same sweep,
//!   captures and replays its own rank's graph, and times its own rank (see [`Stamps`]); rank 0's figures
//!   are the ones reported. Ping-pong and put, which two ranks time together, stay in one process.
//!
//! Each operation is checked once against the library's CPU reference (see `super::checks`) before
//! it is timed. Buffers are allocated when a request is first captured; the graph keeps them alive, and
//! dropping it (for the next request) frees them.

use ferrocomm::{SymBuffer, Team, TeamGraph};
use ferrocomm_device::{bf16, f16};
use ferrocomm_kernels::{Algorithm, CommError, Communicator, Op, PingProtocol, Reducible, Route, Tuning};

use super::checks::{self, put_round_trip, unsupported_u8};
use super::timed::{CapturedTrial, Pattern, Stamps, time_trial};
use super::{
    LL_LABEL, PROCS_LABEL, PROCS_TITLE, TRACED_LABEL, TRACED_RING_EVENTS, bench_team, comm, describe_team, grid,
    iters_u32, runtime, traced_bench_team,
};
use crate::backend::{Backend, BackendError, OpenConfig, Request, Timing};
use crate::cputime::thread_cpu_time;
use crate::model::{Dtype, Mode, Operation};

/// The largest payload of the library's ping-pong kernels (`Communicator::ping_pong` refuses more; the
/// library does not export the constant, and the checks run a ping-pong of exactly this size).
pub const PING_MAX_BYTES: usize = 256;

/// Which series a [`GpuBackend`] measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    /// `gpu`: every operation; release/acquire ping-pong.
    Main,
    /// `gpu-ll`: the LL-packet ping-pong only.
    Ll,
    /// `gpu-procs`: the collectives, one process per rank (a team that spans processes).
    Procs,
    /// `gpu-ll-one-shot`, `gpu-one-shot`, `gpu-two-shot`: the all-reduce with one algorithm at every size
    /// it can run, where the `gpu` series picks by size: the sweep that tunes the thresholds.
    AllReduce(Algorithm),
    /// `gpu-smN`: the put and the collectives with an SM budget of N blocks per rank
    /// (`Communicator::set_sm_budget`), where the `gpu` series uses the tuned grids.
    SmBudget(u32),
    /// `gpu-tma`, `gpu-lsu`: the copies (put, all-gather, all-to-all) with every large copy through the
    /// TMA, or none: the sweep that tunes `Tuning::bulk_min_bytes`.
    Copy(CopyPath),
    /// `gpu-traced`: every operation of the `gpu` series on a traced team (the kernels' traced flavour
    /// recording each put, signal, wait and barrier): what trace mode costs.
    Traced,
}

/// How a [`Variant::Copy`] series copies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CopyPath {
    /// Every copy of at least one stage through the TMA (`bulk_min_bytes = 0`).
    Tma,
    /// Every copy by loads and stores (`bulk_stage_bytes = 0`).
    Loads,
}

/// The copy paths a sweep compares, and their series labels.
pub const COPY_PATHS: [(CopyPath, &str); 2] = [(CopyPath::Tma, "tma"), (CopyPath::Loads, "lsu")];

/// The copy path a series label names, if it names one.
pub fn label_copy_path(label: &str) -> Option<CopyPath> {
    COPY_PATHS.iter().find(|(_, l)| *l == label).map(|(p, _)| *p)
}

/// The series label of a copy path.
pub fn copy_path_label(path: CopyPath) -> &'static str {
    COPY_PATHS.iter().find(|(p, _)| *p == path).map_or("tma", |(_, l)| l)
}

/// Whether a copy-path series measures `op`: the operations whose large copies may go through the TMA.
fn copies(op: Operation) -> bool {
    matches!(op, Operation::PutBandwidth | Operation::AllGather | Operation::AllToAll)
}

/// The series label of an SM budget (`sm16`).
pub fn budget_label(sms: u32) -> String {
    format!("sm{sms}")
}

/// The SM budget a series label names (`sm16` → 16), if it names one.
pub fn label_budget(label: &str) -> Option<u32> {
    label.strip_prefix("sm")?.parse().ok().filter(|&n| n > 0)
}

/// The all-reduce algorithms a sweep measures one by one, in the order the library's thresholds use them.
pub const ALL_REDUCE_ALGORITHMS: [Algorithm; 3] = [Algorithm::LlOneShot, Algorithm::OneShot, Algorithm::TwoShot];

/// The series label of an all-reduce algorithm (`ll-one-shot`, `one-shot`, `two-shot`).
pub fn algorithm_label(algorithm: Algorithm) -> &'static str {
    match algorithm {
        Algorithm::LlOneShot => "ll-one-shot",
        Algorithm::OneShot => "one-shot",
        Algorithm::TwoShot => "two-shot",
    }
}

/// The algorithm a series label names, if it names one.
pub fn label_algorithm(label: &str) -> Option<Algorithm> {
    ALL_REDUCE_ALGORITHMS.into_iter().find(|a| algorithm_label(*a) == label)
}

impl Variant {
    fn protocol(self) -> PingProtocol {
        match self {
            Variant::Main
            | Variant::Procs
            | Variant::AllReduce(_)
            | Variant::SmBudget(_)
            | Variant::Copy(_)
            | Variant::Traced => PingProtocol::ReleaseAcquire,
            Variant::Ll => PingProtocol::Ll,
        }
    }

    /// The series label ([`Backend::label`]).
    pub fn label(self) -> Option<String> {
        match self {
            Variant::Main => None,
            Variant::Ll => Some(LL_LABEL.to_owned()),
            Variant::Procs => Some(PROCS_LABEL.to_owned()),
            Variant::AllReduce(algorithm) => Some(algorithm_label(algorithm).to_owned()),
            Variant::SmBudget(sms) => Some(budget_label(sms)),
            Variant::Copy(path) => Some(copy_path_label(path).to_owned()),
            Variant::Traced => Some(TRACED_LABEL.to_owned()),
        }
    }

    /// The all-reduce algorithm this series forces, if any.
    fn algorithm(self) -> Option<Algorithm> {
        match self {
            Variant::AllReduce(algorithm) => Some(algorithm),
            _ => None,
        }
    }
}

/// GPU-initiated operations through a `Communicator` on a team of GPUs.
#[derive(Debug)]
pub struct GpuBackend {
    // Field order is drop order: the graph (which pins its buffers) before the communicator.
    captured: Option<CapturedTrial>,
    stamps: Stamps,
    comm: Communicator<'static>,
    team: &'static Team,
    variant: Variant,
}

impl GpuBackend {
    /// Opens `variant` on the GPUs of `config` (the process's shared team, see
    /// [`bench_team`](super::bench_team())).
    pub fn open(config: &OpenConfig, variant: Variant) -> Result<GpuBackend, BackendError> {
        let team = match variant {
            Variant::Traced => traced_bench_team(Mode::Gpu, config)?,
            _ => bench_team(Mode::Gpu, config)?,
        };
        GpuBackend::new(team, variant)
    }

    /// `variant` on `team` (any backend: the emulator runs the same kernels, for tests). `gpu-procs` needs a
    /// team that spans processes, and the other variants one that does not; `gpu-traced` a traced team.
    pub fn new(team: &'static Team, variant: Variant) -> Result<GpuBackend, BackendError> {
        if (variant == Variant::Traced) != team.is_traced() {
            return Err(BackendError::NotAvailable {
                mode: Mode::Gpu,
                reason: format!(
                    "the gpu{} series needs a team {} trace mode (Team::builder().trace({}))",
                    variant.label().map(|l| format!("-{l}")).unwrap_or_default(),
                    if team.is_traced() { "without" } else { "with" },
                    !team.is_traced()
                ),
            });
        }
        match (variant, team.spans_processes()) {
            (Variant::Procs, false) => {
                return Err(BackendError::NotAvailable {
                    mode: Mode::Gpu,
                    reason: "the gpu-procs series needs a team that spans processes (start the bench under a \
                             launcher, e.g. `ferrocomm launch -n 2 -- ferrocomm bench --modes gpu`)"
                        .into(),
                });
            }
            (
                Variant::Main
                | Variant::Ll
                | Variant::AllReduce(_)
                | Variant::SmBudget(_)
                | Variant::Copy(_)
                | Variant::Traced,
                true,
            ) => {
                let rank = team.local_ranks().first().copied().unwrap_or(0);
                let what = format!("the gpu{} series", variant.label().map(|l| format!("-{l}")).unwrap_or_default());
                return Err(BackendError::OneProcessOnly { mode: Mode::Gpu, what, rank, world: team.world() });
            }
            _ => {}
        }
        let mut comm_ = match variant {
            Variant::Copy(path) => {
                let mut tuning = Tuning::for_team(team).map_err(comm(Mode::Gpu))?;
                match path {
                    // The TMA where the defaults leave it off (ranks sharing a GPU): its default stages.
                    CopyPath::Tma if tuning.bulk_stage_bytes == 0 => {
                        tuning.bulk_stage_bytes = Tuning::gpu(1, team.world()).bulk_stage_bytes;
                        tuning.bulk_min_bytes = 0;
                    }
                    CopyPath::Tma => tuning.bulk_min_bytes = 0,
                    CopyPath::Loads => tuning.bulk_stage_bytes = 0,
                }
                Communicator::with_tuning(team, tuning)
            }
            _ => Communicator::new(team),
        }
        .map_err(comm(Mode::Gpu))?;
        if let Variant::SmBudget(sms) = variant {
            comm_.set_sm_budget(Some(sms)).map_err(comm(Mode::Gpu))?;
        }
        let stamps = Stamps::new(team).map_err(runtime(Mode::Gpu))?;
        Ok(GpuBackend { captured: None, stamps, comm: comm_, team, variant })
    }

    fn uses_kernel(&self, op: Operation, bytes: u64) -> bool {
        op == Operation::PingPong && bytes <= PING_MAX_BYTES as u64
    }

    /// One launch of the library's ping-pong kernel: `iters` round trips timed inside the kernel.
    fn ping_kernel(&mut self, bytes: usize, iters: u64) -> Result<Timing, BackendError> {
        let iters = iters_u32(Mode::Gpu, iters)?;
        let started = thread_cpu_time();
        let result = self.comm.ping_pong(0, 1, iters, bytes, self.variant.protocol()).map_err(comm(Mode::Gpu))?;
        // Allocation, launch, wait and read-back: the kernel itself needs no host.
        let wait_cpu = thread_cpu_time().saturating_sub(started);
        if result.total_ns == 0 {
            return Err(BackendError::External {
                mode: Mode::Gpu,
                source: "the ping-pong kernel reported 0 ns".into(),
            });
        }
        Ok(Timing { us_per_op: result.one_way_ns() / 1e3, graph: false, sms_used: Some(1), wait_cpu })
    }

    fn blocks(&self, request: &Request) -> u32 {
        grid::blocks(&self.comm, request.op, request.bytes as usize, request.dtype.size(), false)
    }

    /// Times `request` as a replay of its graph, or (`request.graph == false`) as eager launches, its
    /// operations back to back with the series' algorithm.
    fn timed(&mut self, request: &Request) -> Result<Timing, BackendError> {
        let (ranks, blocks) = (self.ranks(request.op), self.blocks(request));
        let how = (Pattern::BackToBack, self.variant.algorithm());
        let (comm_, team) = (&mut self.comm, self.team);
        time_trial(Mode::Gpu, (&mut self.captured, &mut self.stamps), request, (&ranks, blocks), |stamps| {
            workload(comm_, stamps, team, request, how).map_err(comm(Mode::Gpu))
        })
    }

    /// The ranks whose spans time `op`, among those this process runs (its own in a team that spans
    /// processes: each rank times itself).
    fn ranks(&self, op: Operation) -> Vec<usize> {
        let local = self.team.local_ranks();
        let ranks: Vec<usize> = if op.is_collective() { (0..self.team.world()).collect() } else { vec![0, 1] };
        ranks.into_iter().filter(|r| local.contains(r)).collect()
    }

    fn unsupported(&self, op: Operation) -> BackendError {
        let reason = self.supports(op).err().unwrap_or_default();
        BackendError::Unsupported { mode: Mode::Gpu, op, reason }
    }
}

/// Records `request.iters` operations of `request.op` between the clock stamps on fresh buffers: captured
/// into the returned graph, or run now when `request.graph` is false (see [`Stamps::record`]).
fn workload(
    comm_: &mut Communicator<'static>,
    stamps: &mut Stamps,
    team: &'static Team,
    request: &Request,
    (pattern, algorithm): (Pattern, Option<Algorithm>),
) -> Result<Option<TeamGraph<'static>>, CommError> {
    let (bytes, iters, world, graph) = (request.bytes as usize, request.iters, team.world(), request.graph);
    match request.op {
        Operation::PingPong => {
            let (a, mut b, mut c) =
                (SymBuffer::new(team, bytes)?, SymBuffer::new(team, bytes)?, SymBuffer::new(team, bytes)?);
            stamps.record(comm_, iters, graph, pattern, |comm_| put_round_trip(comm_, &a, &mut b, &mut c))
        }
        Operation::PutBandwidth => {
            let (src, mut dst) = (SymBuffer::<u8>::new(team, bytes)?, SymBuffer::<u8>::new(team, bytes)?);
            stamps.record(comm_, iters, graph, pattern, |comm_| {
                Ok(comm_.put(&src, &mut dst, Route::Pair { from: 0, to: 1 })?.wait()?)
            })
        }
        Operation::AllReduce => match request.dtype {
            Dtype::Bf16 => all_reduce::<bf16>(comm_, stamps, team, bytes, (iters, graph, pattern), algorithm),
            Dtype::F16 => all_reduce::<f16>(comm_, stamps, team, bytes, (iters, graph, pattern), algorithm),
            Dtype::F32 => all_reduce::<f32>(comm_, stamps, team, bytes, (iters, graph, pattern), algorithm),
            // `run` refuses u8 before capturing; the empty element type moves nothing.
            Dtype::U8 => Err(CommError::BadTuning { reason: "no u8 all-reduce".into() }),
        },
        Operation::AllGather => {
            let input = SymBuffer::<u8>::new(team, bytes / world)?;
            let mut output = SymBuffer::<u8>::new(team, bytes)?;
            stamps.record(comm_, iters, graph, pattern, |comm_| Ok(comm_.all_gather(&input, &mut output)?.wait()?))
        }
        Operation::AllToAll => {
            // One row of `bytes / world` per destination: every rank sends chunk q of its buffer to rank q.
            let row = bytes / world;
            let send = SymBuffer::<u8>::new(team, row * world)?;
            let counts = SymBuffer::from_host(team, &vec![1u32; world])?;
            let mut recv = SymBuffer::<u8>::new(team, row * world)?;
            let mut recv_counts = SymBuffer::<u32>::new(team, world)?;
            stamps.record(comm_, iters, graph, pattern, |comm_| {
                Ok(comm_.all_to_all(&send, &counts, &mut recv, &mut recv_counts, row, 1)?.wait()?)
            })
        }
    }
}

/// An in-place sum all-reduce of `bytes` per rank, `iters` times.
fn all_reduce<T: Reducible>(
    comm_: &mut Communicator<'static>,
    stamps: &mut Stamps,
    team: &'static Team,
    bytes: usize,
    (iters, graph, pattern): (u64, bool, Pattern),
    algorithm: Option<Algorithm>,
) -> Result<Option<TeamGraph<'static>>, CommError> {
    let mut buf = SymBuffer::<T>::new(team, bytes / size_of::<T>())?;
    stamps.record(comm_, iters, graph, pattern, |comm_| {
        let guard = match algorithm {
            Some(algorithm) => comm_.all_reduce_with(&mut buf, Op::Sum, algorithm)?,
            None => comm_.all_reduce(&mut buf, Op::Sum)?,
        };
        Ok(guard.wait()?)
    })
}

impl Backend for GpuBackend {
    fn mode(&self) -> Mode {
        Mode::Gpu
    }

    fn queue_depth(&self) -> Option<u32> {
        None
    }

    fn world(&self) -> usize {
        self.team.world()
    }

    fn label(&self) -> Option<String> {
        self.variant.label()
    }

    fn measures(&self, op: Operation) -> bool {
        match self.variant {
            Variant::Main | Variant::Traced => true,
            Variant::Ll => op == Operation::PingPong,
            Variant::Procs => op.is_collective(),
            Variant::AllReduce(_) => op == Operation::AllReduce,
            Variant::SmBudget(_) => op != Operation::PingPong,
            Variant::Copy(_) => copies(op),
        }
    }

    fn size_limit(&self, op: Operation) -> Option<(u64, String)> {
        let t = self.comm.tuning();
        match (self.variant, op) {
            (Variant::Ll, Operation::PingPong) => {
                Some((PING_MAX_BYTES as u64, "an LL ping-pong carries its payload in one warp's packets".to_owned()))
            }
            (Variant::AllReduce(Algorithm::LlOneShot), Operation::AllReduce) => Some((
                t.ll_all_reduce_max_bytes as u64,
                "the LL region holds messages up to Tuning::ll_all_reduce_max_bytes".to_owned(),
            )),
            (Variant::AllReduce(Algorithm::OneShot), Operation::AllReduce) => Some((
                t.one_shot_max_bytes as u64,
                "the staging slots hold messages up to Tuning::one_shot_max_bytes".to_owned(),
            )),
            _ => None,
        }
    }

    fn supports(&self, op: Operation) -> Result<(), String> {
        match (self.variant, op) {
            (Variant::Main | Variant::Traced, _) | (Variant::Ll, Operation::PingPong) => Ok(()),
            (Variant::Ll, _) => Err("the gpu-ll series is the LL-packet ping-pong; the gpu series has the rest".into()),
            (Variant::Procs, op) if op.is_collective() => Ok(()),
            (Variant::AllReduce(_), Operation::AllReduce) => Ok(()),
            (Variant::SmBudget(_), op) if op != Operation::PingPong => Ok(()),
            (Variant::Copy(_), op) if copies(op) => Ok(()),
            (Variant::Copy(path), _) => Err(format!(
                "the gpu-{} series is the put, all-gather and all-to-all (the copies the TMA may take)",
                copy_path_label(path)
            )),
            (Variant::SmBudget(sms), _) => Err(format!(
                "the gpu-{} series is the put and the collectives; ping-pongs use one block",
                budget_label(sms)
            )),
            (Variant::AllReduce(algorithm), _) => Err(format!(
                "the gpu-{} series is the all-reduce with that algorithm; the gpu series has the rest",
                algorithm_label(algorithm)
            )),
            (Variant::Procs, _) => Err("the gpu-procs series is the collectives; ping-pong and put are timed across \
                                        two ranks by one process: run them without a launcher"
                .into()),
        }
    }

    fn verify(&mut self, op: Operation, dtype: Dtype) -> Result<(), BackendError> {
        if self.supports(op).is_err() {
            return Err(self.unsupported(op));
        }
        let put_pings = matches!(self.variant, Variant::Main | Variant::Traced);
        checks::check(&mut self.comm, op, dtype, &[self.variant.protocol()], put_pings)
    }

    fn run(&mut self, request: &Request) -> Result<Timing, BackendError> {
        let op = request.op;
        if self.supports(op).is_err() {
            return Err(self.unsupported(op));
        }
        if op == Operation::AllReduce && request.dtype == Dtype::U8 {
            return Err(unsupported_u8());
        }
        if self.uses_kernel(op, request.bytes) {
            return self.ping_kernel(request.bytes as usize, request.iters);
        }
        if self.variant == Variant::Ll {
            return Err(BackendError::Unsupported {
                mode: Mode::Gpu,
                op,
                reason: format!("an LL ping-pong carries at most {PING_MAX_BYTES} bytes"),
            });
        }
        self.timed(&Request { iters: request.iters.max(1), ..*request })
    }

    fn isolated(&mut self, request: &Request) -> Result<Option<Vec<f64>>, BackendError> {
        let op = request.op;
        if op == Operation::PingPong
            || self.supports(op).is_err()
            || (op, request.dtype) == (Operation::AllReduce, Dtype::U8)
        {
            return Ok(None);
        }
        let stamp_error = |e| BackendError::External { mode: Mode::Gpu, source: Box::new(e) };
        let ops = request.iters.max(1);
        let mut stamps = Stamps::spans(self.team, ops).map_err(runtime(Mode::Gpu))?;
        // The back-to-back graph's buffers go first: two generations of 1 GiB buffers need not fit at once.
        self.captured = None;
        let request = Request { iters: ops, graph: true, ..*request };
        let graph =
            workload(&mut self.comm, &mut stamps, self.team, &request, (Pattern::Isolated, self.variant.algorithm()))
                .map_err(comm(Mode::Gpu))?
                .ok_or_else(|| BackendError::External {
                    mode: Mode::Gpu,
                    source: "a capture returned no graph".into(),
                })?;
        // One untimed replay, so that every operation timed runs on warm buffers and a loaded graph.
        stamps.replay(&graph).map_err(stamp_error)?;
        stamps.replay(&graph).map_err(stamp_error)?;
        let spans = stamps.each_ns(&self.ranks(op), ops).map_err(stamp_error)?;
        Ok(Some(spans.into_iter().map(|ns| ns as f64 / 1e3).collect()))
    }

    fn intra_gpu(&self) -> bool {
        super::shares_gpus(self.team)
    }

    fn gpu_ordinals(&self) -> Vec<usize> {
        super::team_ordinals(self.team)
    }

    fn devices(&self) -> Vec<String> {
        describe_team(self.team)
    }

    fn notes(&self) -> Vec<String> {
        match self.variant {
            Variant::Main => vec![
                format!(
                    "gpu: ping-pong up to {PING_MAX_BYTES} B is the library's ping-pong kernel (put, st.release.sys \
                     flag, ld.acquire.sys poll), every round trip of a trial inside one launch, timed by the \
                     kernel with %globaltimer (graph: no; host CPU leaves out the one launch per trial); larger \
                     ping-pongs are a put 0→1 and a put 1→0 per round trip."
                ),
                "gpu: every other operation is a trial's calls captured into one CUDA graph between two \
                 one-thread %globaltimer stamp kernels (with --no-graph: launched one by one, each waited for); \
                 the time is the longest stamped span over the ranks divided by the calls (CUDA events cannot \
                 be recorded on the runtime's streams). SMs: blocks per rank of the library's grid for the call."
                    .to_owned(),
            ],
            Variant::SmBudget(sms) => vec![format!(
                "gpu-{}: the put and the collectives with an SM budget of {sms} blocks per rank \
                 (Communicator::set_sm_budget: every grid capped, the other SMs left to compute), timed as the gpu \
                 series.",
                budget_label(sms)
            )],
            Variant::Copy(path) => vec![format!(
                "gpu-{}: the put, all-gather and all-to-all with {}, timed as the gpu series; where the two \
                 cross is where Tuning::bulk_min_bytes belongs (the recommended tuning below).",
                copy_path_label(path),
                match path {
                    CopyPath::Tma => "every copy of at least one stage through the TMA (bulk_min_bytes=0)",
                    CopyPath::Loads => "every copy by 16-byte loads and stores (bulk_stage_bytes=0)",
                }
            )],
            Variant::AllReduce(algorithm) => vec![format!(
                "gpu-{0}: the all-reduce forced to the {0} algorithm (Communicator::all_reduce_with) at every size it \
                 can run, timed as the gpu series; the gpu series picks the algorithm by size, and these series \
                 are where the picking thresholds come from (the recommended tuning below).",
                algorithm_label(algorithm)
            )],
            Variant::Traced => {
                let lost: u64 = self.team.trace_lost().iter().sum();
                let kept = self.team.trace_events().len();
                vec![format!(
                    "gpu-traced: the gpu series on a traced team (Team::builder().trace(true), as FERROCOMM_TRACE=1 \
                     makes): the kernels' traced flavour, which records every put, signal, wait, barrier and epoch \
                     advance into the rank's ring in device memory, timed as the gpu series; the host collects the \
                     rings after each replay, outside the timed span. Its ratio to gpu is trace mode's cost (the \
                     Trace mode overhead table). Events: {kept} kept{}.",
                    if lost > 0 {
                        format!(
                            ", {lost} more counted as lost (beyond the {TRACED_RING_EVENTS} a ring holds per launch or \
                             the {} the host keeps; a full ring still counts each event on the device)",
                            ferrocomm::trace::HOST_TRACE_EVENTS
                        )
                    } else {
                        String::new()
                    }
                )]
            }
            Variant::Ll => vec![format!(
                "gpu-ll: the library's LL-packet ping-pong (data and flag in each 16-byte store, no fence), every \
                 round trip of a trial inside one launch, timed with %globaltimer; payloads up to {PING_MAX_BYTES} B."
            )],
            Variant::Procs => {
                let mut notes = vec![format!(
                    "gpu-procs ({PROCS_TITLE}): {} processes of one rank each, on {}.",
                    self.team.world(),
                    describe_team(self.team).join(", ")
                )];
                let devices: Vec<_> = (0..self.team.world()).filter_map(|r| self.team.device(r).ok()).collect();
                let shared = devices
                    .iter()
                    .enumerate()
                    .find(|(i, d)| matches!(d, ferrocomm::Device::Cuda { .. }) && devices[..*i].contains(d));
                if let Some((_, device)) = shared {
                    notes.push(format!(
                        "gpu-procs: processes share {device} (FERROCOMM_RANKS_PER_GPU); without MPS the kernels of \
                         different processes take turns on a GPU (time slices), so these gpu-procs figures time \
                         that, not the library: compare with gpu on one GPU per process."
                    ));
                }
                notes
            }
        }
    }
}
