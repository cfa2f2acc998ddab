//! The tensor-parallel decode step's host side: its shape, the plan the kernels run, and the launch of
//! the split-K GEMV (`kernels::tp_decode`).

use ferrocomm::{LaunchConfig, LaunchGuard, SymBuffer};
use ferrocomm_device::bf16;
use ferrocomm_device::reduce::sum_across_warps_bytes;

use super::{CommError, Communicator};
use crate::kernels::tp_decode::{self, TOKENS_PER_WARP};
use crate::layout::{TP_MAX_TOKENS, TP_TILE_COLS, TP_WARPS, TpPlan};

/// GEMV blocks per multiprocessor the split count aims for: 16 warps per SM keep enough 16-byte weight
/// loads in flight to stream HBM.
const BLOCKS_PER_SM: usize = 4;

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
    /// The plan of `shape` on this team: its column tiles and enough row splits per tile for
    /// [`BLOCKS_PER_SM`] blocks on each multiprocessor a rank may use (`Tuning::max_blocks`), each split at
    /// least one row per warp. A shape the kernels cannot run is an error saying why.
    pub fn tp_plan(&self, shape: TpShape) -> Result<TpPlan, CommError> {
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
        let target = BLOCKS_PER_SM * self.tuning().max_blocks as usize;
        let splits = target.div_ceil(tiles).clamp(1, k_local.div_ceil(TP_WARPS));
        Ok(TpPlan {
            tokens: shape.tokens as u64,
            hidden: shape.hidden as u64,
            k_local: k_local as u64,
            tiles: tiles as u64,
            splits: splits as u64,
        })
    }

    /// The split-K GEMV of `plan` on every rank: `partials` (`plan.partials_len()` `f32`s) receives this
    /// rank's `x` (`tokens x k_local`) times `w` (`k_local x hidden`, row-major) as one partial tile per
    /// (tile, split); their sum over the splits, and over the ranks, is the layer's output.
    pub fn tp_gemv<'a>(
        &'a mut self,
        x: &'a SymBuffer<bf16>,
        w: &'a SymBuffer<bf16>,
        partials: &'a mut SymBuffer<f32>,
        plan: TpPlan,
    ) -> Result<LaunchGuard<'a>, CommError> {
        let len = |what, expected: usize, found: usize| {
            if found == expected { Ok(()) } else { Err(CommError::LengthMismatch { what, expected, found }) }
        };
        len("tensor-parallel weights (k_local x hidden)", (plan.k_local * plan.hidden) as usize, w.len())?;
        len("tensor-parallel input (tokens x k_local)", (plan.tokens * plan.k_local) as usize, x.len())?;
        len("tensor-parallel partial sums (TpPlan::partials_len)", plan.partials_len(), partials.len())?;
        let blocks = (plan.tiles * plan.splits) as u32;
        let cfg = LaunchConfig::new(blocks, (TP_WARPS * 32) as u32)
            .with_shared_bytes(sum_across_warps_bytes(8 * TOKENS_PER_WARP, TP_WARPS) as u32);
        Ok(tp_decode::tp_gemv::launch(self.team(), cfg, x, w, partials, plan)?)
    }
}
