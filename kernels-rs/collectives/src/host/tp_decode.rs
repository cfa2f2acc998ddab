//! The tensor-parallel decode step's host side: its shape, the plan the kernels run, and the launch of
//! the split-K GEMV (`kernels::tp_decode`).

use ferrocomm::{LaunchConfig, LaunchGuard, SignalPadBuffer, SymBuffer};
use ferrocomm_device::abi::SIGNAL_PAD_EPOCH_SLOTS;
use ferrocomm_device::bf16;
use ferrocomm_device::ll::LlPacket;
use ferrocomm_device::reduce::{sum_across_block_bytes, sum_across_warp_groups_bytes};

use super::{CommError, Communicator, Op};
use crate::kernels::tp_decode::{self, OneRowGroup, TwoRowGroups};
use crate::layout::{
    MAX_BLOCKS, TP_ITERATION_ROWS, TP_MAX_TILES, TP_MAX_TOKENS, TP_RESIDENT_BLOCKS_PER_SM, TP_TILE_COLS, TP_WARPS,
    TpPlan, tp_pad,
};

// The fused step runs as many blocks as the GEMV alone (up to `MAX_BLOCKS` multiprocessors' worth), and each
// block of a kernel that uses a signal pad has an epoch slot in it.
const _: () = assert!(MAX_BLOCKS * TP_RESIDENT_BLOCKS_PER_SM as usize <= SIGNAL_PAD_EPOCH_SLOTS);

/// `launcher::<G>(args...)` with `G` the instance type of `plan.row_groups` ([`tp_decode::RowGroups`]):
/// the product's kernels have an instance per count.
macro_rules! with_row_groups {
    ($plan:expr, $($launcher:ident)::+ ($($arg:expr),* $(,)?)) => {
        if $plan.row_groups == 1 {
            $($launcher)::+::<OneRowGroup>($($arg),*)
        } else {
            $($launcher)::+::<TwoRowGroups>($($arg),*)
        }
    };
}

/// The RMSNorm's epsilon.
pub const TP_RMS_EPS: f32 = 1e-5;

/// A decode step's shape: `tokens` rows of `x`, `hidden` output columns and `k` rows of the whole weight
/// matrix, of which each rank holds `k / world` (the row-parallel linear layer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TpShape {
    /// Tokens in the step (batch), 1 ..= 16.
    pub tokens: usize,
    /// Output columns (the model's hidden size), a multiple of 8.
    pub hidden: usize,
    /// Input features of the whole layer; a multiple of the team size.
    pub k: usize,
}

impl TpShape {
    /// This rank's rows of the weights: `k / world`.
    pub fn k_local(&self, world: usize) -> usize {
        self.k / world
    }
}

impl Communicator<'_> {
    /// The plan of `shape` on this team: its column tiles and as many row splits per tile as keep the grid
    /// within `Tuning::tp_blocks_per_sm` blocks on each multiprocessor a rank may use (`Tuning::max_blocks`),
    /// each split whole iterations (`TP_ITERATION_ROWS` rows) but the last, and two row groups per block from
    /// `Tuning::tp_row_groups_min_tokens` tokens where they fill that wave as well as one would. A shape the
    /// kernels cannot run is an error saying why.
    pub fn tp_plan(&self, shape: TpShape) -> Result<TpPlan, CommError> {
        self.tp_plan_within(shape, (self.tuning().tp_blocks_per_sm * self.tuning().max_blocks) as usize)
    }

    /// [`tp_plan`](Self::tp_plan) for a grid of at most `max_grid` blocks (but one split per tile).
    fn tp_plan_within(&self, shape: TpShape, max_grid: usize) -> Result<TpPlan, CommError> {
        let world = self.world();
        let bad = |reason: String| Err(CommError::BadShape { shape: format!("{shape:?}"), reason });
        if shape.tokens == 0 || shape.tokens > TP_MAX_TOKENS {
            return bad(format!("tokens must be 1 ..= {TP_MAX_TOKENS}"));
        }
        if shape.hidden == 0 || !shape.hidden.is_multiple_of(8) {
            return bad("hidden must be a positive multiple of 8 (one 16-byte vector of weights)".into());
        }
        if shape.k == 0 || !shape.k.is_multiple_of(world) {
            return bad(format!("k must be a positive multiple of the team size ({world})"));
        }
        let (tiles, k_local) = (shape.hidden.div_ceil(TP_TILE_COLS), shape.k_local(world));
        if k_local > u32::MAX as usize {
            return bad(format!("k / world must be below 2^32 rows (the kernels count rows in 32 bits): {k_local}"));
        }
        // One wave of at most `max_grid` blocks (a second, partly filled wave would cost a whole block's
        // time), the splits as even as whole iterations allow.
        let splits = |row_groups: usize| {
            let most = (max_grid / (tiles * row_groups)).clamp(1, k_local.div_ceil(TP_ITERATION_ROWS));
            k_local.div_ceil(k_local.div_ceil(most).next_multiple_of(TP_ITERATION_ROWS))
        };
        // Two row groups from `tp_row_groups_min_tokens` tokens, where their wave holds as many blocks as
        // one's and stays within `max_grid` (one row group always may: one split per tile is the least grid
        // there is).
        let shared_rows = shape.tokens >= self.tuning().tp_row_groups_min_tokens as usize
            && tiles * 2 <= max_grid
            && 2 * splits(2) >= splits(1);
        let row_groups = if shared_rows { 2 } else { 1 };
        Ok(TpPlan {
            tokens: shape.tokens as u64,
            hidden: shape.hidden as u64,
            k_local: k_local as u64,
            tiles: tiles as u64,
            splits: splits(row_groups) as u64,
            row_groups: row_groups as u64,
            eps_bits: u64::from(TP_RMS_EPS.to_bits()),
        })
    }

    /// The split-K GEMV of `plan` on every rank: `partials` (at least `plan.partials_len()` `f32`s) receives this
    /// rank's `x` (`tokens x k_local`) times `w` (`k_local x hidden`, row-major) as one partial tile per
    /// (tile, split); their sum over the splits, and over the ranks, is the layer's output.
    pub fn tp_gemv<'a>(
        &'a mut self,
        x: &'a SymBuffer<bf16>,
        w: &'a SymBuffer<bf16>,
        partials: &'a mut SymBuffer<f32>,
        plan: TpPlan,
    ) -> Result<LaunchGuard<'a>, CommError> {
        check_operands(plan, x, w)?;
        if partials.len() < plan.partials_len() {
            let (what, expected) =
                ("tensor-parallel partial sums (at least TpPlan::partials_len)", plan.partials_len());
            return Err(CommError::LengthMismatch { what, expected, found: partials.len() });
        }
        let cfg = LaunchConfig::new(plan.grid() as u32, (TP_WARPS * 32) as u32)
            .with_shared_bytes(product_shared_bytes(plan) as u32);
        Ok(with_row_groups!(plan, tp_decode::tp_gemv::launch(self.team(), cfg, x, w, partials, plan))?)
    }
}

/// Dynamic shared memory of a block of `plan`'s product: where its warps share rows, their products meet
/// there (none otherwise, which leaves that much more to L1).
fn product_shared_bytes(plan: TpPlan) -> usize {
    if plan.row_groups > 1 { sum_across_warp_groups_bytes(8, TP_WARPS) } else { 0 }
}

/// `found` elements where `what` needs exactly `expected`.
fn exact_len(what: &'static str, expected: usize, found: usize) -> Result<(), CommError> {
    if found == expected { Ok(()) } else { Err(CommError::LengthMismatch { what, expected, found }) }
}

/// The product's operands have `plan`'s shape: `w` is `k_local x hidden`, `x` is `tokens x k_local`.
fn check_operands(plan: TpPlan, x: &SymBuffer<bf16>, w: &SymBuffer<bf16>) -> Result<(), CommError> {
    exact_len("tensor-parallel weights (k_local x hidden)", (plan.k_local * plan.hidden) as usize, w.len())?;
    exact_len("tensor-parallel input (tokens x k_local)", (plan.tokens * plan.k_local) as usize, x.len())
}

/// How a decode step runs (see [`TpDecode::step`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TpVariant {
    /// The GEMV, the sum of its splits, the library's all-reduce and a norm kernel, one after the other:
    /// the layer as separate kernels (what a CPU-orchestrated stack runs, with its own all-reduce).
    ThreeKernels,
    /// The GEMV, then the fused all-reduce, residual and RMSNorm: two kernels.
    TwoKernels,
    /// One kernel: each block pushes its finished tile to the tile's owner as soon as it is done; the
    /// reduction and the norm finish as the tiles arrive. In LL packets for steps of up to
    /// `Tuning::tp_ll_max_tokens` tokens, else with a put and a signal per tile ([`FusedProtocol`]).
    Fused,
}

/// How the fused step's tiles travel (see [`TpDecode::fused_protocol`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FusedProtocol {
    /// LL packets (`tp_fused_ll`): data and flag in one 16-byte store, polled by each reader; no fence.
    Ll,
    /// A put and a release-acquire signal per tile (`tp_fused`).
    Signal,
}

/// The fused step's buffers for its protocol: every rank's partial tiles, the reduced tiles and their sums
/// of squares.
enum FusedBuffers {
    /// LL packets, the partial tiles in two parities of `world` regions.
    Ll { partials: SymBuffer<LlPacket>, gather: SymBuffer<LlPacket>, squares: SymBuffer<LlPacket> },
    /// `f32`s, the partial tiles in `world` regions.
    Signal { partials: SymBuffer<f32>, gather: SymBuffer<f32>, squares: SymBuffer<f32> },
}

/// The buffers and pads of tensor-parallel decode steps of one shape: `out = rmsnorm(x · w summed over
/// the ranks + residual) * gamma` in `bf16`, on every rank.
pub struct TpDecode {
    /// The shape.
    pub shape: TpShape,
    plan: TpPlan,
    fused: TpPlan,
    partials: SymBuffer<f32>,
    /// The three-kernel step's split sums, which its all-reduce sums over the ranks.
    y: SymBuffer<f32>,
    gather: SymBuffer<f32>,
    squares: SymBuffer<f32>,
    two_pad: SignalPadBuffer,
    fused_buffers: FusedBuffers,
    fused_pad: SignalPadBuffer,
}

impl std::fmt::Debug for TpDecode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TpDecode")
            .field("shape", &self.shape)
            .field("plan", &self.plan)
            .field("fused", &self.fused)
            .field("fused_protocol", &self.fused_protocol())
            .finish()
    }
}

impl TpDecode {
    /// Allocates the buffers of `shape` on `comm`'s team (every rank calls it, in a team that spans
    /// processes). The fused kernel needs every block co-resident, so its plan keeps to the blocks its launch
    /// bounds keep resident on each multiprocessor a rank may use (`Tuning::max_blocks`); its buffers are
    /// those of its protocol, LL packets up to `Tuning::tp_ll_max_tokens` tokens.
    pub fn new(comm: &Communicator<'_>, shape: TpShape) -> Result<TpDecode, CommError> {
        let plan = comm.tp_plan(shape)?;
        if plan.tiles as usize > TP_MAX_TILES {
            return Err(CommError::BadShape {
                shape: format!("{shape:?}"),
                reason: format!("hidden must be at most {} columns", TP_MAX_TILES * TP_TILE_COLS),
            });
        }
        // Every block of the fused kernel must be resident at once: no more per multiprocessor than its launch
        // bounds keep room for.
        let per_sm = comm.tuning().tp_blocks_per_sm.min(TP_RESIDENT_BLOCKS_PER_SM);
        let fused_grid = (per_sm * comm.tuning().max_blocks) as usize;
        let fused = comm.tp_plan_within(shape, fused_grid)?;
        let team = comm.team();
        let world = comm.world();
        let tiles_len = plan.tiles as usize * shape.tokens * TP_TILE_COLS;
        // Each reducing block's sums of squares, an entry per tile share: room for as many shares as a tile
        // can have, one per 128 of its `tokens * 64` vectors (`TpPlan::reduce_parts`, which the grid can
        // bound further).
        let squares_len = plan.tiles as usize * shape.tokens.div_ceil(2) * TP_MAX_TOKENS;
        let fused_buffers = if shape.tokens <= comm.tuning().tp_ll_max_tokens as usize {
            // Two packets per 16-byte vector of `f32`s: half a packet per `f32`.
            let packets = |floats: usize| floats / 2;
            FusedBuffers::Ll {
                partials: SymBuffer::new(team, 2 * world * packets(fused.partials_len()))?,
                gather: SymBuffer::new(team, packets(tiles_len))?,
                squares: SymBuffer::new(team, packets(squares_len))?,
            }
        } else {
            FusedBuffers::Signal {
                partials: SymBuffer::new(team, world * fused.partials_len())?,
                gather: SymBuffer::new(team, tiles_len)?,
                squares: SymBuffer::new(team, squares_len)?,
            }
        };
        Ok(TpDecode {
            shape,
            plan,
            fused,
            partials: SymBuffer::new(team, plan.partials_len())?,
            y: SymBuffer::new(team, tiles_len)?,
            gather: SymBuffer::new(team, tiles_len)?,
            squares: SymBuffer::new(team, squares_len)?,
            two_pad: SignalPadBuffer::new(team, "ferrocomm.tp_decode.two_kernels", tp_pad::SIGNALS)?,
            fused_buffers,
            fused_pad: SignalPadBuffer::new(team, "ferrocomm.tp_decode.fused", tp_pad::SIGNALS)?,
        })
    }

    /// The plan of the GEMV (two kernels) and of the fused kernel.
    pub fn plans(&self) -> (TpPlan, TpPlan) {
        (self.plan, self.fused)
    }

    /// How the fused step's tiles travel, chosen by the token count (`Tuning::tp_ll_max_tokens`).
    pub fn fused_protocol(&self) -> FusedProtocol {
        match self.fused_buffers {
            FusedBuffers::Ll { .. } => FusedProtocol::Ll,
            FusedBuffers::Signal { .. } => FusedProtocol::Signal,
        }
    }

    /// One decode step by `variant`: `x` (`tokens x k/world`, this rank's shard), `w` (`k/world x hidden`),
    /// `residual` (`tokens x hidden`), `gamma` (`hidden`) in; `out` (`tokens x hidden`) the same on every
    /// rank. Waits for each launch (inside `Communicator::capture` the waits are recorded, not made).
    #[allow(clippy::too_many_arguments)]
    pub fn step(
        &mut self,
        comm: &mut Communicator<'_>,
        variant: TpVariant,
        x: &SymBuffer<bf16>,
        w: &SymBuffer<bf16>,
        residual: &SymBuffer<bf16>,
        gamma: &SymBuffer<bf16>,
        out: &mut SymBuffer<bf16>,
    ) -> Result<(), CommError> {
        self.check_epilogue_operands(residual, gamma, out)?;
        let threads = (TP_WARPS * 32) as u32;
        match variant {
            TpVariant::ThreeKernels => {
                let inputs = TpInputs { x, w, residual, gamma };
                self.step_with_all_reduce(comm, inputs, out, |comm, y| -> Result<(), CommError> {
                    comm.all_reduce(y, Op::Sum)?.wait()?;
                    Ok(())
                })?;
            }
            TpVariant::TwoKernels => {
                let plan = self.plan;
                comm.tp_gemv(x, w, &mut self.partials, plan)?.wait()?;
                let cfg = LaunchConfig::new(plan.epilogue_grid(comm.world()) as u32, threads)
                    .with_shared_bytes(sum_across_block_bytes(TP_MAX_TOKENS, TP_WARPS) as u32);
                let (partials, gather, squares) = (&self.partials, &mut self.gather, &mut self.squares);
                tp_decode::tp_reduce_norm::launch(
                    comm.team(),
                    cfg,
                    partials,
                    gather,
                    squares,
                    residual,
                    gamma,
                    out,
                    &self.two_pad,
                    plan,
                )?
                .wait()?;
            }
            TpVariant::Fused => {
                let plan = self.fused;
                check_operands(plan, x, w)?;
                let shared = sum_across_block_bytes(TP_MAX_TOKENS, TP_WARPS).max(product_shared_bytes(plan));
                let cfg = LaunchConfig::new(plan.grid() as u32, threads).with_shared_bytes(shared as u32);
                let (team, pad) = (comm.team(), &self.fused_pad);
                match &mut self.fused_buffers {
                    FusedBuffers::Ll { partials, gather, squares } => with_row_groups!(
                        plan,
                        tp_decode::tp_fused_ll::launch(
                            team, cfg, x, w, partials, gather, squares, residual, gamma, out, pad, plan
                        )
                    )?
                    .wait()?,
                    FusedBuffers::Signal { partials, gather, squares } => with_row_groups!(
                        plan,
                        tp_decode::tp_fused::launch(
                            team, cfg, x, w, partials, gather, squares, residual, gamma, out, pad, plan
                        )
                    )?
                    .wait()?,
                }
            }
        }
        Ok(())
    }

    /// `residual` and `out` are `tokens x hidden`, `gamma` is `hidden`.
    fn check_epilogue_operands(
        &self,
        residual: &SymBuffer<bf16>,
        gamma: &SymBuffer<bf16>,
        out: &SymBuffer<bf16>,
    ) -> Result<(), CommError> {
        let (tokens, hidden) = (self.shape.tokens, self.shape.hidden);
        exact_len("tensor-parallel residual (tokens x hidden)", tokens * hidden, residual.len())?;
        exact_len("tensor-parallel norm weights (hidden)", hidden, gamma.len())?;
        exact_len("tensor-parallel output (tokens x hidden)", tokens * hidden, out.len())
    }

    /// The three-kernel step with `all_reduce` between its kernels: the GEMV, the sum of its splits into
    /// `y` (this rank's `f32` partial output, padded to whole tiles: `tiles x tokens x TP_TILE_COLS`), then
    /// `all_reduce(comm, y)`, which must leave the sum over the ranks in every rank's `y`, then the norm.
    /// [`TpVariant::ThreeKernels`] passes the library's all-reduce; another library's, enqueued on each
    /// rank's stream ([`ferrocomm::Team::cuda_stream`]), makes the CPU-orchestrated layer a stack without
    /// GPU-initiated communication runs (NCCL's, say), captured into the same graph.
    pub fn step_with_all_reduce<E: From<CommError>>(
        &mut self,
        comm: &mut Communicator<'_>,
        inputs: TpInputs<'_>,
        out: &mut SymBuffer<bf16>,
        all_reduce: impl FnOnce(&mut Communicator<'_>, &mut SymBuffer<f32>) -> Result<(), E>,
    ) -> Result<(), E> {
        let TpInputs { x, w, residual, gamma } = inputs;
        self.check_epilogue_operands(residual, gamma, out)?;
        let (tokens, hidden) = (self.shape.tokens, self.shape.hidden);
        let threads = (TP_WARPS * 32) as u32;
        let plan = self.plan;
        comm.tp_gemv(x, w, &mut self.partials, plan)?.wait().map_err(CommError::from)?;
        let items = self.y.len().div_ceil(4);
        let cfg = LaunchConfig::new(
            items.div_ceil(threads as usize).clamp(1, comm.tuning().max_blocks as usize) as u32,
            threads,
        );
        let summed = tp_decode::tp_split_sum::launch(comm.team(), cfg, &self.partials, &mut self.y, plan);
        summed.map_err(CommError::from)?.wait().map_err(CommError::from)?;
        all_reduce(comm, &mut self.y)?;
        // A thread per 8 columns (up to 1024): each one's columns are a single load away.
        let norm_threads = (hidden / 8).next_multiple_of(32).clamp(32, 1024);
        let cfg = LaunchConfig::new(tokens as u32, norm_threads as u32)
            .with_shared_bytes(sum_across_block_bytes(1, norm_threads / 32) as u32);
        let normed = tp_decode::tp_norm::launch(comm.team(), cfg, &self.y, residual, gamma, out, plan);
        normed.map_err(CommError::from)?.wait().map_err(CommError::from)?;
        Ok(())
    }
}

/// The operands of one decode step, on every rank: `x` (`tokens x k/world`, this rank's shard), `w`
/// (`k/world x hidden`), `residual` (`tokens x hidden`) and `gamma` (`hidden`).
#[derive(Debug, Clone, Copy)]
pub struct TpInputs<'a> {
    /// This rank's shard of the input activations.
    pub x: &'a SymBuffer<bf16>,
    /// This rank's rows of the weights, row-major.
    pub w: &'a SymBuffer<bf16>,
    /// The residual added before the norm.
    pub residual: &'a SymBuffer<bf16>,
    /// The norm's weights.
    pub gamma: &'a SymBuffer<bf16>,
}
