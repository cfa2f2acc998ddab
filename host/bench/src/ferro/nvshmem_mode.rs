//! The `nvshmem` mode: the bench's operations as kernels that put with signals through NVSHMEM's device
//! API (`ferrocomm-nvshmem-kernels`, its NVSHMEM flavour: `nvshmemx_putmem_signal_nbi_block`, signal
//! polls, `nvshmem_quiet`), on a team initialised with NVSHMEM: what a kernel pays for reaching its peers
//! through NVSHMEM, which reaches other nodes too, beside the `gpu` mode's direct loads and stores.
//!
//! NVSHMEM runs one PE per process. On its own the bench is one PE (the first GPU of `--gpus`): the put
//! and the ping-pong go from PE 0 to itself and the collectives move one PE's data, as NVSHMEM's own
//! `self 1 PE` figures do. Under a launcher every process is one PE of the job's team, and every operation
//! runs between them (the put and the ping-pong between PEs 0 and 1).
//!
//! Timing is the `gpu` mode's: a trial's launches captured into one CUDA graph between two `%globaltimer`
//! stamps ([`Stamps`]), the longest stamped span over the ranks this process runs, per operation; the
//! ping-pong is one launch of the trial's round trips, halved per hop. Each operation is checked against
//! its CPU reference before it is timed.

use ferrocomm::{SymBuffer, Team, TeamGraph};
use ferrocomm_device::{bf16, f16};
use ferrocomm_kernels::{CommError, Communicator};
use ferrocomm_nvshmem_kernels::host::{
    BYTES_PER_BLOCK, CheckError, NvshmemOps, PING_WARP_MAX_BYTES, REDUCE_BYTES_PER_BLOCK, check_all_gather,
    check_all_reduce_sum, check_all_to_all, check_ping_pong, check_put,
};
use ferrocomm_nvshmem_kernels::ops::{MAX_OPS_BLOCKS, Summand, nvshmem_all_reduce_sum};

use super::timed::{CapturedTrial, Pattern, Stamps, time_trial};
use super::{comm, describe_team, iters_u32, runtime};
use crate::backend::{Backend, BackendError, Request, Timing};
use crate::model::{Dtype, Mode, Operation};

const MODE: Mode = Mode::Nvshmem;

/// The bench's operations through NVSHMEM on a team of PEs.
#[derive(Debug)]
pub struct NvshmemBackend {
    // Field order is drop order: the graph (which pins its buffers) before the operations' pads.
    captured: Option<CapturedTrial>,
    stamps: Stamps,
    ops: NvshmemOps<'static>,
    comm: Communicator<'static>,
    team: &'static Team,
}

fn check_error(op: Operation) -> impl FnOnce(CheckError) -> BackendError {
    move |e| match e {
        CheckError::Runtime(e) => runtime(MODE)(e),
        mismatch => BackendError::Verification { mode: MODE, op, detail: mismatch.to_string() },
    }
}

impl NvshmemBackend {
    /// The mode on `team`, a team initialised with NVSHMEM (or an emulated one: the emulator runs the same
    /// kernels on its own memory).
    pub fn new(team: &'static Team) -> Result<NvshmemBackend, BackendError> {
        let comm_ = Communicator::new(team).map_err(comm(MODE))?;
        let ops = NvshmemOps::new(team).map_err(runtime(MODE))?;
        let stamps = Stamps::new(team).map_err(runtime(MODE))?;
        Ok(NvshmemBackend { captured: None, stamps, ops, comm: comm_, team })
    }

    /// The ranks whose spans time `op`, among those this process runs.
    fn ranks(&self, op: Operation) -> Vec<usize> {
        let local = self.team.local_ranks();
        let (a, b) = self.ops.pair();
        let ranks: Vec<usize> = if op.is_collective() { (0..self.team.world()).collect() } else { vec![a, b] };
        ranks.into_iter().filter(|r| local.contains(r)).collect()
    }

    fn blocks(&self, request: &Request) -> u32 {
        let world = self.team.world() as u64;
        match request.op {
            Operation::AllGather | Operation::AllToAll => self.ops.blocks((request.bytes / world) as usize),
            Operation::PingPong => 1,
            Operation::PutBandwidth => self.ops.blocks(request.bytes as usize),
            Operation::AllReduce => self.ops.reduce_blocks(request.bytes as usize),
        }
    }
}

/// A trial of `request` between the stamps on fresh buffers: `request.iters` launches back to back, or for
/// the ping-pong one launch of that many round trips; captured into the returned graph, or run now when
/// `request.graph` is false.
fn workload(
    comm_: &mut Communicator<'static>,
    stamps: &mut Stamps,
    ops: &NvshmemOps<'static>,
    request: &Request,
) -> Result<Option<TeamGraph<'static>>, CommError> {
    let team = ops.team();
    let (bytes, iters, graph, world) = (request.bytes as usize, request.iters, request.graph, team.world());
    let back_to_back = Pattern::BackToBack;
    match request.op {
        Operation::PingPong => {
            let (payload, mut inbox) = (SymBuffer::<u8>::new(team, bytes)?, SymBuffer::<u8>::new(team, bytes)?);
            let pad = ops.ping_pad()?;
            let round_trips = u32::try_from(iters).map_err(|_| CommError::BadTuning {
                reason: format!("{iters} round trips in one launch is more than the kernel counts"),
            })?;
            stamps.record(comm_, 1, graph, back_to_back, |_| {
                Ok(ops.ping_pong(&payload, &mut inbox, &pad, ops.pair(), round_trips)?.wait()?)
            })
        }
        Operation::PutBandwidth => {
            let (src, mut dst) = (SymBuffer::<u8>::new(team, bytes)?, SymBuffer::<u8>::new(team, bytes)?);
            stamps.record(comm_, iters, graph, back_to_back, |_| Ok(ops.put(&src, &mut dst, ops.pair())?.wait()?))
        }
        Operation::AllReduce => match request.dtype {
            Dtype::F32 => all_reduce::<f32>(comm_, stamps, ops, bytes, (iters, graph)),
            Dtype::Bf16 => all_reduce::<bf16>(comm_, stamps, ops, bytes, (iters, graph)),
            Dtype::F16 => all_reduce::<f16>(comm_, stamps, ops, bytes, (iters, graph)),
            Dtype::U8 => Err(CommError::BadTuning { reason: "no u8 all-reduce".into() }),
        },
        Operation::AllGather => {
            let input = SymBuffer::<u8>::new(team, bytes / world)?;
            let mut output = SymBuffer::<u8>::new(team, bytes)?;
            stamps.record(comm_, iters, graph, back_to_back, |_| Ok(ops.all_gather(&input, &mut output)?.wait()?))
        }
        Operation::AllToAll => {
            let row = bytes / world;
            let (send, mut recv) = (SymBuffer::<u8>::new(team, row * world)?, SymBuffer::<u8>::new(team, row * world)?);
            stamps.record(comm_, iters, graph, back_to_back, |_| Ok(ops.all_to_all(&send, &mut recv, row)?.wait()?))
        }
    }
}

/// The in-place sum of `bytes` per rank, `iters` times.
fn all_reduce<T: Summand + nvshmem_all_reduce_sum::Instance>(
    comm_: &mut Communicator<'static>,
    stamps: &mut Stamps,
    ops: &NvshmemOps<'static>,
    bytes: usize,
    (iters, graph): (u64, bool),
) -> Result<Option<TeamGraph<'static>>, CommError> {
    let team = ops.team();
    let len = bytes / size_of::<T>();
    let mut data = SymBuffer::<T>::new(team, len)?;
    let mut stage = SymBuffer::<T>::new(team, 2 * team.world() * len)?;
    stamps
        .record(comm_, iters, graph, Pattern::BackToBack, |_| Ok(ops.all_reduce_sum(&mut data, &mut stage)?.wait()?))
}

impl Backend for NvshmemBackend {
    fn mode(&self) -> Mode {
        MODE
    }

    fn queue_depth(&self) -> Option<u32> {
        None
    }

    fn world(&self) -> usize {
        self.team.world()
    }

    fn supports(&self, _op: Operation) -> Result<(), String> {
        Ok(())
    }

    fn verify(&mut self, op: Operation, dtype: Dtype) -> Result<(), BackendError> {
        let ops = &self.ops;
        // Sizes on both sides of one block's chunk, with tails that are not whole vectors.
        let sizes = [1, 333, 2 * BYTES_PER_BLOCK + 77];
        let checked = match op {
            Operation::PingPong => [8, 1000].into_iter().try_for_each(|bytes| check_ping_pong(ops, bytes, 3)),
            Operation::PutBandwidth => sizes.into_iter().try_for_each(|bytes| check_put(ops, bytes, 2)),
            Operation::AllGather => sizes.into_iter().try_for_each(|bytes| check_all_gather(ops, bytes, 2)),
            Operation::AllToAll => sizes.into_iter().try_for_each(|bytes| check_all_to_all(ops, bytes, 2)),
            Operation::AllReduce => {
                let lens = sizes.map(|bytes| bytes.div_ceil(dtype.size()));
                match dtype {
                    Dtype::F32 => lens.into_iter().try_for_each(|len| check_all_reduce_sum::<f32>(ops, len, 2)),
                    Dtype::Bf16 => lens.into_iter().try_for_each(|len| check_all_reduce_sum::<bf16>(ops, len, 2)),
                    Dtype::F16 => lens.into_iter().try_for_each(|len| check_all_reduce_sum::<f16>(ops, len, 2)),
                    Dtype::U8 => return Err(unsupported_u8()),
                }
            }
        };
        checked.map_err(check_error(op))
    }

    fn run(&mut self, request: &Request) -> Result<Timing, BackendError> {
        if (request.op, request.dtype) == (Operation::AllReduce, Dtype::U8) {
            return Err(unsupported_u8());
        }
        let request = Request { iters: request.iters.max(1), ..*request };
        if request.op == Operation::PingPong {
            iters_u32(MODE, request.iters)?;
        }
        let (ranks, blocks) = (self.ranks(request.op), self.blocks(&request));
        let (comm_, ops) = (&mut self.comm, &self.ops);
        time_trial(MODE, (&mut self.captured, &mut self.stamps), &request, (&ranks, blocks), |stamps| {
            workload(comm_, stamps, ops, &request).map_err(comm(MODE))
        })
    }

    /// Ranks sharing a GPU, or one PE talking to itself.
    fn intra_gpu(&self) -> bool {
        super::shares_gpus(self.team) || (self.team.world() == 1 && self.team.backend() == ferrocomm::Backend::Cuda)
    }

    fn gpu_ordinals(&self) -> Vec<usize> {
        super::team_ordinals(self.team)
    }

    fn devices(&self) -> Vec<String> {
        describe_team(self.team)
    }

    fn notes(&self) -> Vec<String> {
        let world = self.team.world();
        let pes = if world == 1 {
            "one PE in this process (NVSHMEM runs one PE per process): the put and the ping-pong go from PE 0 to \
             itself and the collectives move one PE's data, as NVSHMEM's `self 1 PE` figures do; under a launcher \
             every process is a PE"
                .to_owned()
        } else {
            format!("{world} PEs, one per process, on {}", describe_team(self.team).join(", "))
        };
        vec![format!(
            "nvshmem: kernels that put with signals through NVSHMEM's device API (ferrocomm-nvshmem-kernels: \
             nvshmemx_putmem_signal_nbi_block, signal polls, nvshmem_quiet), {pes}. A block of 512 threads per {} \
             KiB of each destination's message, up to one per SM ({} at most); the all-reduce is one-shot (every \
             PE's data to every PE, summed in f32), a block per {} KiB; the ping-pong one block, a warp up to {} \
             B. Timed as the gpu series: a trial's launches in one CUDA graph between %globaltimer stamps (so \
             each put or collective includes its launch, where NVSHMEM's own put figures divide one kernel's time \
             by the puts it issued); the ping-pong is one launch of the trial's round trips.",
            BYTES_PER_BLOCK >> 10,
            MAX_OPS_BLOCKS,
            REDUCE_BYTES_PER_BLOCK >> 10,
            PING_WARP_MAX_BYTES,
        )]
    }
}

/// The all-reduce of bytes, which the kernels do not sum.
fn unsupported_u8() -> BackendError {
    BackendError::Unsupported {
        mode: MODE,
        op: Operation::AllReduce,
        reason: "the NVSHMEM all-reduce sums f32, f16 and bf16; pass --dtype bf16 (or f16, f32)".into(),
    }
}
