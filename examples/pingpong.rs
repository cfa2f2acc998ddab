//! Ping-pong latency between two ranks: one kernel runs thousands of round trips, timed on the device with
//! `%globaltimer`; the one-way latency is half a round trip. Both flag protocols: release/acquire (put, then
//! `st.release.sys` of a flag; the peer polls with `ld.acquire.sys`) and LL packets (data and flag in each
//! 16-byte store). Each side's inbox is checked for the other's payload.
//!
//! ```sh
//! cargo run --release --example pingpong
//! cargo run --release --example pingpong -- --bytes 8,64 --protocol ll --iters 100000
//! cargo run --release --example pingpong -- --initiator 1 --responder 0
//! ```

use std::process::ExitCode;

use clap::{Parser, ValueEnum};
use ferrocomm_examples::ping_pong::{default_iters, ping_pong};
use ferrocomm_examples::{ExampleError, Platform, open_team};
use ferrocomm_kernels::{Communicator, PingProtocol};

/// Ping-pong latency between two ranks, on every GPU present or the CPU emulator.
#[derive(Debug, Parser)]
struct Args {
    /// Payload bytes per message, comma-separated (0 to 256).
    #[arg(long, value_delimiter = ',', default_values_t = [0usize, 8, 64, 256])]
    bytes: Vec<usize>,
    /// Flag protocol.
    #[arg(long, value_enum, default_value_t = Protocol::Both)]
    protocol: Protocol,
    /// Round trips per measurement [default: 10000 on GPUs, 200 on the emulator].
    #[arg(long)]
    iters: Option<u32>,
    /// The rank that starts each round trip and times it.
    #[arg(long, default_value_t = 0)]
    initiator: usize,
    /// The rank that answers.
    #[arg(long, default_value_t = 1)]
    responder: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Protocol {
    /// LL packets.
    Ll,
    /// Release store, acquire poll.
    ReleaseAcquire,
    /// Both, LL first.
    Both,
}

fn run(args: &Args) -> Result<(), ExampleError> {
    let team = open_team()?;
    print!("{}", Platform::of(&team));
    let mut comm = Communicator::new(&team)?;
    let iters = args.iters.unwrap_or_else(|| default_iters(team.backend()));
    let protocols = match args.protocol {
        Protocol::Ll => vec![PingProtocol::Ll],
        Protocol::ReleaseAcquire => vec![PingProtocol::ReleaseAcquire],
        Protocol::Both => vec![PingProtocol::Ll, PingProtocol::ReleaseAcquire],
    };
    for protocol in protocols {
        for &bytes in &args.bytes {
            let result = ping_pong(&mut comm, args.initiator, args.responder, iters, bytes, protocol)?;
            println!("{}", result.line());
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    match run(&Args::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
