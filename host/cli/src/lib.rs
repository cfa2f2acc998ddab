//! The `ferrocomm` command's subcommands, as a library so they can be tested without spawning it.
//!
//! - [`doctor`]: what this machine offers ferrocomm (driver, GPUs, NVLink / P2P, PTX JIT, ptxas).
//! - [`trace`]: `ferrocomm trace FILE [--svg OUT]` sums up a trace of trace mode (per-rank timeline, time
//!   waiting vs moving data, bytes to each peer) and draws its timeline.
//! - [`launch`]: `ferrocomm launch -n N [--emulator] -- PROGRAM ARGS...` starts N processes of a program on
//!   this machine with the environment torchrun gives its workers (`RANK`, `WORLD_SIZE`, `LOCAL_RANK`,
//!   `LOCAL_WORLD_SIZE`, `GROUP_RANK`, `MASTER_ADDR`, `MASTER_PORT`), plus `FERROCOMM_RENDEZVOUS` (ferrocomm's
//!   own rendezvous, hosted by rank 0, on a port of its own) and, with `--emulator`,
//!   `FERROCOMM_BACKEND=emulator` — for machines without torch.
//!
//! ## `ferrocomm launch`
//!
//! Each rank's stdout and stderr come back line by line, prefixed `[rank i] `. The launcher exits 0 when
//! every rank does, else with the first failing rank's status (128 + signal for a rank killed by a signal);
//! after that first failure the other ranks get `--grace` seconds (10) to exit, then SIGTERM, then SIGKILL
//! 2 s later. A program that cannot be started exits 127 (126 if it cannot be executed), as in a shell.
//! Every rank leads a process group of its own, so stopping it stops what it started; SIGINT, SIGTERM and
//! SIGHUP sent to the launcher are forwarded to every rank (SIGKILL follows 2 s later), so Ctrl-C leaves no
//! orphans (a signal ignored when the launcher starts, as under `nohup`, stays ignored).
//!
//! ```text
//! ferrocomm launch -n 2 --emulator -- cargo run --release --example quickstart
//! ferrocomm launch -n 4 --grace 5 --rendezvous-timeout 60 -- ./my_job --steps 100
//! ```
#![forbid(unsafe_code)]

pub mod doctor;
pub mod launch;
pub mod trace;
