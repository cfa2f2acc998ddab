//! Trace mode: what the device library's trace hooks record (puts, signals, waits, barriers, epoch
//! advances, marks), collected from every local rank's ring after each launch or graph replay and written
//! as a Perfetto/Chrome trace JSON when the team is dropped (or on [`Team::write_trace`](crate::Team::write_trace)).
//!
//! ```no_run
//! use ferrocomm::Team;
//! # fn main() -> Result<(), ferrocomm::Error> {
//! let team = Team::builder().trace(true).build()?; // or FERROCOMM_TRACE=1
//! // ... launches ...
//! team.write_trace("run.json")?; // open it in https://ui.perfetto.dev
//! # Ok(()) }
//! ```
//!
//! On a GPU a traced team loads each kernels crate's *traced flavour* (PTX compiled with `--cfg
//! ferrocomm_trace`, see `ferrocomm_builder`); untraced teams load the ordinary modules, whose PTX has no
//! trace code at all. The emulator records into the same rings, with host timestamps. Each rank's ring
//! holds [`TraceConfig::capacity`] events per launch; events past it are counted ([`Team::trace_lost`](crate::Team::trace_lost)),
//! never dropped silently.
//!
//! | variable | effect |
//! | --- | --- |
//! | `FERROCOMM_TRACE=1` | trace every team the process builds (`0`: none), unless its builder says otherwise (`TeamBuilder::trace`) |
//! | `FERROCOMM_TRACE_DIR` | where a dropped team writes `ferrocomm-trace-<pid>-team<id>.json` (default `.`) |
//! | `FERROCOMM_TRACE_EVENTS` | events per rank per launch (default 65536) |

pub use crate::event::{TraceEvent, TraceWhat};
pub use crate::team::trace::{
    DEFAULT_TRACE_EVENTS, HOST_TRACE_EVENTS, TRACE_DIR_ENV, TRACE_ENV, TRACE_EVENTS_ENV, TraceConfig,
};
