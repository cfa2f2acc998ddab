// Kernels of every argument kind, launched through their generated launchers on a two-rank emulated team:
// results, length relations and the guard's wait, end to end.
#![deny(warnings)]
use ferrocomm::{Error, KernelModule, LaunchConfig, SignalPadBuffer, SymBuffer, Team};
use ferrocomm_device::kernel;
use ferrocomm_device::prelude::*;

static __FERROCOMM_MODULE: KernelModule = KernelModule::new("ui", &[]);

/// `dst[i] = src[i] * by`, one thread per element.
#[kernel(len(dst) == len(src), no_wait)]
pub fn scale(dst: &mut [f32], src: &[f32], by: f32) {
    let i = global_thread_idx();
    if i < dst.len() {
        dst[i] = src[i] * by;
    }
}

/// Every rank sends `src` into the next rank's `inbox` and waits for the previous rank's data.
#[kernel(len(inbox) >= len(src))]
pub fn ring(src: &[f32], inbox: SymSliceMut<f32>, pad: SignalPad) {
    let (rank, world) = (team::rank(), team::world());
    let session = pad.session(); // the launch's epoch, advanced when the session ends
    let epoch = session.epoch();
    let next = (rank + 1) % world;
    put_signal(Group::Block, inbox.peer(next).slice(0, src.len()), src, pad.peer(next, rank as usize), SignalOp::Add(1));
    if thread_rank() == 0 {
        pad.local(((rank + world - 1) % world) as usize).wait_ge(epoch);
    }
    sync_threads();
}

/// Reads the next rank's copy of a symmetric input.
#[kernel(len(out) <= len(table), no_wait)]
pub fn fetch(out: &mut [u32], table: SymSlice<u32>, enabled: bool) {
    if enabled {
        let next = (team::rank() + 1) % team::world();
        let n = out.len();
        get(Group::Block, out, table.peer(next).slice(0, n));
    }
}

/// Takes nothing.
#[kernel(no_wait)]
pub fn nothing() {}

fn main() -> Result<(), Error> {
    let team = Team::emulated(2)?;
    let src = SymBuffer::from_host(&team, &[1.0f32, 2.0, 3.0, 4.0, 5.0])?;
    let mut dst = SymBuffer::<f32>::new(&team, 5)?;
    scale::launch(&team, LaunchConfig::new(2, 4), &mut dst, &src, 2.0)?.wait()?;
    for rank in 0..2 {
        assert_eq!(dst.to_host(rank)?, [2.0, 4.0, 6.0, 8.0, 10.0]);
    }

    // A violated relation is a typed error naming the kernel, the argument, the relation and both lengths;
    // nothing runs.
    let short = SymBuffer::<f32>::new(&team, 3)?;
    match scale::launch(&team, LaunchConfig::new(1, 8), &mut dst, &short, 2.0) {
        Err(Error::Requirement { kernel, argument, relation, values }) => {
            assert_eq!((kernel, argument, relation), ("scale", "dst", "len(dst) == len(src)"));
            assert_eq!(values, "len(dst) = 5, len(src) = 3; 5 == 3");
        }
        other => panic!("expected a length mismatch, got {:?}", other.map(|_| ())),
    }
    assert_eq!(dst.to_host(0)?, [2.0, 4.0, 6.0, 8.0, 10.0]);

    let mut inbox = SymBuffer::<f32>::new(&team, 8)?;
    let pad = SignalPadBuffer::new(&team, "ring", team.world())?;
    let mut mine = SymBuffer::<f32>::new(&team, 5)?;
    mine.copy_from_host(0, &[10.0, 11.0, 12.0, 13.0, 14.0])?;
    mine.copy_from_host(1, &[20.0, 21.0, 22.0, 23.0, 24.0])?;
    ring::launch(&team, LaunchConfig::new(1, 32), &mine, &mut inbox, &pad)?.wait()?;
    assert_eq!(inbox.to_host(0)?[..5], [20.0, 21.0, 22.0, 23.0, 24.0]);
    assert_eq!(inbox.to_host(1)?[..5], [10.0, 11.0, 12.0, 13.0, 14.0]);

    let mut table = SymBuffer::<u32>::new(&team, 4)?;
    table.copy_from_host(0, &[1, 2, 3, 4])?;
    table.copy_from_host(1, &[5, 6, 7, 8])?;
    let mut out = SymBuffer::<u32>::new(&team, 3)?;
    fetch::launch(&team, LaunchConfig::new(1, 32), &mut out, &table, true)?.wait()?;
    assert_eq!(out.to_host(0)?, [5, 6, 7]);
    assert_eq!(out.to_host(1)?, [1, 2, 3]);

    nothing::launch(&team, LaunchConfig::single())?.wait()?;
    Ok(())
}
