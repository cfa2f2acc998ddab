//! [`CommError`]: what a collective call can refuse or fail with, each message naming the fix.

use crate::layout::{MAX_BLOCKS, MAX_WORLD};

/// Why a collective call failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CommError {
    /// The runtime failed: a launch, a buffer check, or a device error (timeout, panic) reported by the
    /// launch guard.
    #[error(transparent)]
    Runtime(#[from] ferrocomm::Error),
    /// The team has more ranks than the kernels' signal arrays hold.
    #[error("the team has {world} ranks; the communication kernels support at most {MAX_WORLD}")]
    WorldTooLarge {
        /// Ranks in the team.
        world: usize,
    },
    /// Two buffers' lengths do not have the relation the collective needs.
    #[error("{what}: expected {expected} elements, found {found}; allocate the buffer with that length")]
    LengthMismatch {
        /// Which buffer and relation.
        what: &'static str,
        /// The length the call needs.
        expected: usize,
        /// The length given.
        found: usize,
    },
    /// A rank argument (root, peer) is not in the team.
    #[error("{what} {rank} is not a rank of this team of {world}")]
    RankOutOfRange {
        /// Which argument.
        what: &'static str,
        /// The value given.
        rank: usize,
        /// Ranks in the team.
        world: usize,
    },
    /// A message is larger than the buffer the chosen path has room for.
    #[error("{what} of {bytes} bytes exceeds the {max} bytes this path allows; {fix}")]
    TooLarge {
        /// What was too large.
        what: &'static str,
        /// Its size.
        bytes: usize,
        /// The limit.
        max: usize,
        /// How to get under the limit.
        fix: &'static str,
    },
    /// A tensor-parallel decode shape the kernels cannot run.
    #[error("tensor-parallel shape {shape}: {reason}")]
    BadShape {
        /// The shape asked for.
        shape: String,
        /// What is wrong and what is allowed.
        reason: String,
    },
    /// A tuning value the kernels cannot run with.
    #[error("invalid tuning: {reason}")]
    BadTuning {
        /// What is wrong and what is allowed.
        reason: String,
    },
    /// A point-to-point route that moves nothing or names no rank.
    #[error("invalid route {route}: {reason}")]
    BadRoute {
        /// The route, as written.
        route: String,
        /// What is wrong.
        reason: &'static str,
    },
}

impl CommError {
    /// The tuning error for a block count above the signal arrays' size.
    pub(crate) fn too_many_blocks(field: &str, blocks: u32) -> CommError {
        CommError::BadTuning { reason: format!("{field} = {blocks}; at most {MAX_BLOCKS} blocks per kernel") }
    }
}
