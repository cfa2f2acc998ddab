//! The host API: a [`Communicator`] owns the signal pads, the LL buffer and the two-shot scratch of a team,
//! chooses an algorithm and a grid per call and launches one kernel per collective. Every call returns the
//! launch's guard without waiting, so calls can be captured into a CUDA graph (`Team::capture`) and
//! replayed; epochs live on the device, so replays need no host work.
//!
//! | module | what |
//! | --- | --- |
//! | `communicator` | [`Communicator`]: construction, barrier, ping-pong, put, get |
//! | `collectives` | all-reduce, reduce-scatter, all-gather, broadcast, all-to-all |
//! | `tuning` | [`Tuning`]: grids, thresholds, capacities |
//! | `tp_decode` | [`TpShape`], the tensor-parallel decode step's plan and GEMV |
//! | [`reference`] | CPU references |
//! | [`verify`] | correctness scenarios against the references (tests, benchmark) |
//! | `error` | [`CommError`] |

mod collectives;
mod communicator;
mod error;
pub mod reference;
mod tp_decode;
mod tuning;
pub mod verify;

pub use communicator::{Communicator, PingPong, PingProtocol, Route};
pub use error::CommError;
pub use tp_decode::{FusedProtocol, TP_RMS_EPS, TpDecode, TpInputs, TpShape, TpVariant};
pub use tuning::{TUNING_ENV, TUNING_FILE_ENV, Tuning};

use ferrocomm_device::{bf16, f16};

use crate::element::{self, Element, ReduceOp};
use crate::kernels::{all_reduce_ll, one_shot, two_shot};

/// A reduction operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// Sum.
    Sum,
    /// Maximum.
    Max,
    /// Minimum.
    Min,
}

impl Op {
    /// The code the kernels receive (`layout::op_code`).
    pub fn code(self) -> u32 {
        match self {
            Op::Sum => element::Sum::CODE,
            Op::Max => element::Max::CODE,
            Op::Min => element::Min::CODE,
        }
    }

    /// `acc ⊕ x` on `f32` accumulators, as the kernels compute it.
    pub fn apply(self, acc: f32, x: f32) -> f32 {
        match self {
            Op::Sum => element::Sum::apply(acc, x),
            Op::Max => element::Max::apply(acc, x),
            Op::Min => element::Min::apply(acc, x),
        }
    }
}

/// How an all-reduce runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// LL one-shot: every rank pushes its input as LL packets to every peer and reduces what it receives;
    /// one kernel, one one-way trip, 2x the bytes on the wire. Small messages.
    LlOneShot,
    /// One-shot push: every rank stores its input into every peer's staging slot with plain 16-byte
    /// stores and one release flag per block, then reduces what it received. Mid-size messages.
    OneShot,
    /// Two-shot: reduce-scatter by pushing chunks into the owners' scratch, then all-gather by storing the
    /// reduced chunks into every peer; segmented by the scratch size. Large messages.
    TwoShot,
}

/// How a broadcast, all-gather or all-to-all moves its messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ExchangeTransport {
    /// LL packets into the communicator's LL buffer, unpacked by the receiver: one one-way trip.
    Ll,
    /// Plain 16-byte stores into the receiver's staging slot and one release flag per block, copied out by
    /// the receiver: one one-way trip at full link efficiency, plus a local copy.
    Staged,
    /// Direct 16-byte stores into the receiver's buffer after a ready handshake, then a release signal.
    Direct,
}

/// Element types the reducing collectives support: `f32`, `f16`, `bf16` — those every reducing kernel has
/// an instance for, so the collectives launch through the kernels' generic launchers.
pub trait Reducible:
    Element
    + all_reduce_ll::all_reduce::Instance
    + one_shot::all_reduce::Instance
    + two_shot::all_reduce::Instance
    + two_shot::reduce_scatter::Instance
{
}

impl Reducible for f32 {}
impl Reducible for f16 {}
impl Reducible for bf16 {}
