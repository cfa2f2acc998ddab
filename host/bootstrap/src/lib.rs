//! `ferrocomm-bootstrap`: how the processes of one job find each other.
//!
//! A multi-GPU job runs one process per GPU, started by torchrun, mpirun or srun (or `ferrocomm
//! launch`). Each process reads its place in the job from the launcher's variables ([`JobEnv`]), joins
//! a TCP rendezvous hosted by rank 0 ([`Rendezvous`]: all-gathers and barriers of a few bytes), and
//! passes file descriptors to the processes of its host over Unix sockets ([`FdMesh`]). Every wait
//! has a deadline, and every failure — a rank that never started, one that crashed, two that disagree
//! — comes back on every rank as the same [`BootstrapError`], naming the ranks and the fix.
//!
//! ```
//! use std::net::TcpListener;
//! use std::time::Duration;
//! use ferrocomm_bootstrap::{BootstrapError, FdMesh, JobEnv, Rendezvous};
//!
//! # fn main() -> Result<(), BootstrapError> {
//! // Two ranks as threads of one process; a real job has a process per GPU, each calling
//! // `JobEnv::from_env()`, and rank 0 calling `Rendezvous::connect` like the others.
//! let listener = TcpListener::bind("127.0.0.1:0").expect("a free port");
//! let addr = listener.local_addr().expect("bound");
//! let mut listener = Some(listener);
//! let ranks: Vec<_> = (0..2)
//!     .map(|rank| {
//!         let listener = listener.take();
//!         std::thread::spawn(move || -> Result<Vec<Vec<u8>>, BootstrapError> {
//!             let env = JobEnv::explicit(rank, 2, rank, 2, addr)?;
//!             let timeout = Duration::from_secs(10);
//!             let rdv = match listener {
//!                 Some(listener) => Rendezvous::host(&env, listener, timeout)?, // rank 0, on a bound port
//!                 None => Rendezvous::connect(&env, timeout)?,
//!             };
//!             assert_eq!(rdv.local_ranks(), &[0, 1]);
//!             let names = rdv.all_gather("names", format!("rank {rank}").as_bytes())?;
//!
//!             // A descriptor of each rank reaches the other.
//!             let mesh = FdMesh::connect(&rdv)?;
//!             let (read, _write) = std::io::pipe().expect("a pipe");
//!             let theirs = mesh.exchange("pipes", std::os::fd::AsFd::as_fd(&read), b"pipe")?;
//!             assert!(theirs[rank].is_none() && theirs[1 - rank].is_some());
//!             rdv.barrier("done")?;
//!             Ok(names)
//!         })
//!     })
//!     .collect();
//! for rank in ranks {
//!     assert_eq!(rank.join().unwrap()?, [b"rank 0".to_vec(), b"rank 1".to_vec()]);
//! }
//! # Ok(()) }
//! ```
//!
//! | module | what it does |
//! | --- | --- |
//! | [`env`](mod@env) | [`JobEnv`], [`Launcher`]: the layout from torchrun, Open MPI, Slurm or `FERROCOMM_*` variables |
//! | [`rendezvous`] | [`Rendezvous`]: joining through rank 0, all-gather, barrier, local ranks |
//! | [`fd`] | [`FdMesh`]: Unix sockets between the ranks of a host, descriptors over `SCM_RIGHTS` |
//! | [`error`] | [`BootstrapError`]: every failure, naming the ranks, the operation and the fix |
//! | `join` (private) | the rendezvous handshake: rank 0's checks, the others' retries |
//! | `protocol` (private) | the rendezvous messages, errors included, and their encoding |
//! | `wire` (private) | length-prefixed frames with deadlines, the binary encoding, polling |
//! | `slurm` (private) | Slurm's tasks-per-node lists |
//!
//! The crate is for Linux: the mesh uses the abstract Unix-socket namespace.

#![warn(missing_docs)]

pub mod env;
pub mod error;
pub mod fd;
mod join;
mod protocol;
pub mod rendezvous;
mod slurm;
mod wire;

pub use env::{JobEnv, Launcher};
pub use error::BootstrapError;
pub use fd::FdMesh;
pub use rendezvous::Rendezvous;
