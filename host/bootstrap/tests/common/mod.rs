//! Helpers shared by the integration tests: ranks as threads on a port of their own.

#![allow(dead_code)] // each test file uses some of them

use std::net::{SocketAddr, TcpListener};
use std::thread::JoinHandle;
use std::time::Duration;

use ferrocomm_bootstrap::{BootstrapError, JobEnv, Rendezvous};

/// A listener on a free loopback port: its address is unique to the test, and so is the job key.
pub fn listener() -> (TcpListener, SocketAddr) {
    let l = TcpListener::bind("127.0.0.1:0").expect("a free loopback port");
    let addr = l.local_addr().expect("bound");
    (l, addr)
}

/// Explicit layouts for `hosts.len()` ranks, rank r on host `hosts[r]`, local ranks in rank order.
pub fn envs(addr: SocketAddr, hosts: &[&str]) -> Vec<JobEnv> {
    let world = hosts.len();
    (0..world)
        .map(|rank| {
            let same: Vec<usize> = (0..world).filter(|&r| hosts[r] == hosts[rank]).collect();
            let local_rank = same.iter().position(|&r| r == rank).unwrap();
            let mut env = JobEnv::explicit(rank, world, local_rank, same.len(), addr).unwrap();
            env.host = hosts[rank].to_owned();
            env
        })
        .collect()
}

/// Runs `body` on a thread with the rendezvous of `env`: rank 0 hosts on `listener` when given one.
pub fn spawn<R: Send + 'static>(
    env: JobEnv,
    listener: Option<TcpListener>,
    timeout: Duration,
    body: impl FnOnce(Result<Rendezvous, BootstrapError>) -> R + Send + 'static,
) -> JoinHandle<R> {
    std::thread::spawn(move || {
        let rdv = match listener {
            Some(l) => Rendezvous::host(&env, l, timeout),
            None => Rendezvous::connect(&env, timeout),
        };
        body(rdv)
    })
}

/// Runs `body` on every env at once (rank 0 on `listener`) and returns the results in env order.
pub fn run_all<R: Send + 'static>(
    envs: Vec<JobEnv>,
    listener: TcpListener,
    timeout: Duration,
    body: impl Fn(Result<Rendezvous, BootstrapError>) -> R + Send + Sync + Clone + 'static,
) -> Vec<R> {
    let mut listener = Some(listener);
    let handles: Vec<_> = envs
        .into_iter()
        .map(|env| {
            let l = if env.rank == 0 { listener.take() } else { None };
            spawn(env, l, timeout, body.clone())
        })
        .collect();
    handles.into_iter().map(|h| h.join().expect("a rank panicked")).collect()
}
