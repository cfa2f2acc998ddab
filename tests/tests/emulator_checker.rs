//! The emulator's checker: each classic bug of GPU-initiated communication planted in a small kernel, and
//! the finding it must produce — a typed `DeviceError` naming rank, block, thread, buffer and source line —
//! next to the correct kernel, which must run clean.
//!
//! - a put's destination read before waiting on the signal that covers it (read first; a wait on a signal
//!   raised before the put; a relaxed flag; a block that does not share its leader's wait): `Race`;
//! - a non-blocking put's source rewritten before its `quiet()`, or never quieted: `SourceOverwritten`;
//! - a wait on a signal no rank raises: `UnraisedSignal` (a signal raised too low stays a `Timeout`);
//! - ranks or blocks that advance a signal pad's barrier epoch differently: `BarrierMismatch`.
//!
//! The kernels are emulator-only (`#[kernel]` with a module that holds no PTX): they run on emulated teams.

use std::time::Duration;

use ferrocomm::{
    Backend, BufferRef, DeviceError, Error, GpuThread, KernelModule, LaunchConfig, SignalPadBuffer, SignalRef,
    SymBuffer, Team,
};
use ferrocomm_device::abi::{ErrorBuffer, ErrorKind, LaunchCtx, RawSym, SIGNAL_PAD_EPOCH_SLOTS, ThreadRef};
use ferrocomm_device::emu::TeamLaunch;
use ferrocomm_device::kernel;
use ferrocomm_device::prelude::*;
use ferrocomm_tests::{EMULATED_HANG, EMULATED_LIMIT};

/// The kernels of this file have no PTX: they run on the emulator only.
static EMU_ONLY: KernelModule = KernelModule::new("emulator_checker", &[]);

const LEN: usize = 32;

/// How `send_then_read`'s receiver reads (or its sender signals).
mod mode {
    /// Wait (acquire), then read: correct.
    pub const WAIT_THEN_READ: u32 = 0;
    /// Read, then wait.
    pub const READ_BEFORE_WAIT: u32 = 1;
    /// The sender raises signal 1 before the put and signal 0 after it; the receiver waits on signal 1.
    pub const WRONG_SIGNAL: u32 = 2;
    /// Relaxed flag store and relaxed wait: nothing orders the data with the flag.
    pub const RELAXED_FLAG: u32 = 3;
    /// Thread 0 waits, `sync_threads()`, then every thread reads its element: correct.
    pub const BLOCK_AFTER_BARRIER: u32 = 4;
    /// Thread 0 waits and every thread reads its element, with no barrier in between.
    pub const BLOCK_WITHOUT_BARRIER: u32 = 5;
}

/// Rank 0 puts `src` into rank 1's `inbox` and raises rank 1's signal 0; rank 1 reads the inbox into `out`
/// as `how` (a [`mode`]) says. Launch one block of `LEN` threads on two ranks.
#[kernel(module = crate::EMU_ONLY)]
pub fn send_then_read(src: &[u32], inbox: SymSliceMut<u32>, out: &mut [u32], pad: SignalPad, how: u32) {
    let (rank, t) = (team::rank(), thread_rank() as usize);
    if rank == 0 {
        if t == 0 {
            if how == mode::WRONG_SIGNAL {
                pad.peer(1, 1).set_release(1);
            }
            put(Group::Thread, inbox.peer(1), src);
            if how == mode::RELAXED_FLAG {
                pad.peer(1, 0).set_relaxed(1);
            } else {
                pad.peer(1, 0).set_release(1);
            }
        }
        return;
    }
    let mine = inbox.local();
    match how {
        mode::BLOCK_AFTER_BARRIER | mode::BLOCK_WITHOUT_BARRIER => {
            if t == 0 {
                pad.local(0).wait_ge(1);
            }
            if how == mode::BLOCK_AFTER_BARRIER {
                sync_threads();
            }
            // SAFETY: in bounds; ordered after the put only with the barrier.
            out[t] = unsafe { mine.read(t) }; // BLOCK-READ
        }
        _ if t != 0 => {}
        mode::READ_BEFORE_WAIT => {
            // SAFETY: in bounds (the bug: nothing orders it after the put).
            out[0] = unsafe { mine.read(0) }; // READ-BEFORE-WAIT
            pad.local(0).wait_ge(1);
        }
        mode::WRONG_SIGNAL => {
            pad.local(1).wait_ge(1);
            // SAFETY: in bounds (the bug: signal 1 was raised before the put).
            out[0] = unsafe { mine.read(0) }; // READ-AFTER-WRONG-WAIT
        }
        mode::RELAXED_FLAG => {
            pad.local(0).wait_relaxed(Cmp::Ge, 1);
            // SAFETY: in bounds (the bug: a relaxed flag publishes nothing).
            out[0] = unsafe { mine.read(0) }; // READ-AFTER-RELAXED-WAIT
        }
        _ => {
            pad.local(0).wait_ge(1);
            // SAFETY: the acquire above orders the read after the put.
            out[0] = unsafe { mine.read(0) };
        }
    }
}

/// Rank 0's thread 0 starts a non-blocking put of `src` into rank 1's `inbox` and then rewrites `src[0]`:
/// after `token.quiet()` (`how` 0, correct), before `quiet()` (1), or without ever quieting it (2).
#[kernel(module = crate::EMU_ONLY)]
pub fn overwrite_source(src: &mut [u32], inbox: SymSliceMut<u32>, how: u32) {
    if team::rank() != 0 || thread_rank() != 0 {
        return;
    }
    match how {
        0 => {
            let token = put_nbi(Group::Thread, inbox.peer(1), src);
            token.quiet();
            src[0] = 7;
        }
        1 => {
            // A token forgotten instead of dropped (its drop would complete the put) lets the source change.
            core::mem::forget(put_nbi(Group::Thread, inbox.peer(1), src)); // PUT-THEN-QUIET
            src[0] = 7;
            quiet();
        }
        _ => {
            core::mem::forget(put_nbi(Group::Thread, inbox.peer(1), src)); // PUT-NEVER-QUIETED
            src[0] = 7;
        }
    }
}

/// Rank 0 raises rank 1's signal `index` to `value`; rank 1 waits until its signal 0 is at least `want`.
#[kernel(module = crate::EMU_ONLY)]
pub fn raise_and_wait(pad: SignalPad, index: u32, value: u64, want: u64) {
    if thread_rank() != 0 {
        return;
    }
    match team::rank() {
        0 => pad.peer(1, index as usize).set_release(value),
        1 => {
            pad.local(0).wait_ge(want); // UNRAISED-WAIT
        }
        _ => {}
    }
}

/// No rank or block skips the end of its session.
const NONE: u32 = u32::MAX;

/// A signal-pad barrier (the collectives' pattern): thread `q` of block 0 raises rank `q`'s `arrived[rank]`
/// to the pad's epoch and waits for its own `arrived[q]`; then every block ends the epoch — except rank
/// `skip_rank` and block `skip_block`, which forget their session instead of dropping it (the bug).
#[kernel(module = crate::EMU_ONLY)]
pub fn pad_barrier(pad: SignalPad, skip_rank: u32, skip_block: u32) {
    let (rank, world) = (team::rank(), team::world());
    let session = pad.session(); // ADVANCE
    let epoch = session.epoch();
    let q = thread_rank();
    if block_rank() == 0 && q < world && q != rank {
        pad.peer(q, rank as usize).set_release(epoch);
        pad.local(q as usize).wait_ge(epoch);
    }
    if rank == skip_rank || block_rank() == skip_block {
        core::mem::forget(session);
    }
}

/// The 1-based line of this file that holds `marker` (and is not this lookup).
fn line_of(marker: &str) -> u32 {
    let pos = include_str!("emulator_checker.rs")
        .lines()
        .position(|l| l.contains(marker) && !l.contains("line_of("))
        .expect("marker line");
    pos as u32 + 1
}

fn team(world: usize, timeout: Duration) -> Team {
    Team::builder().backend(Backend::Emulator).world(world).timeout(timeout).build().expect("an emulated team")
}

/// The buffers of `send_then_read` and `overwrite_source`.
struct Mail {
    src: SymBuffer<u32>,
    inbox: SymBuffer<u32>,
    out: SymBuffer<u32>,
    pad: SignalPadBuffer,
}

impl Mail {
    fn new(team: &Team) -> Mail {
        let data: Vec<u32> = (0..LEN as u32).map(|i| 100 + i).collect();
        Mail {
            src: SymBuffer::from_host(team, &data).unwrap(),
            inbox: SymBuffer::new(team, LEN).unwrap().named("inbox"),
            out: SymBuffer::new(team, LEN).unwrap(),
            pad: SignalPadBuffer::new(team, "mail", 2).unwrap(),
        }
    }

    fn send_then_read(&mut self, team: &Team, how: u32) -> Result<(), Error> {
        let cfg = LaunchConfig::new(1, LEN as u32);
        send_then_read::launch(team, cfg, &self.src, &mut self.inbox, &mut self.out, &self.pad, how)?.wait()
    }
}

/// The reader's side of a race: who read, where in the source, and what.
fn race_of(e: &DeviceError) -> (usize, [u32; 3], [u32; 3], &BufferRef, GpuThread, u32) {
    match e {
        DeviceError::Race { at, buffer, writer, location, .. } => {
            assert!(location.file.ends_with("emulator_checker.rs"), "{location}");
            (at.rank, at.block, at.thread, buffer, *writer, location.line)
        }
        other => panic!("expected a race, got {other}"),
    }
}

const WRITER: GpuThread = GpuThread { rank: 0, block: [0, 0, 0], thread: [0, 0, 0] };

fn inbox_element(index: usize) -> BufferRef {
    BufferRef::Element { buffer: "`inbox`".into(), owner: 1, index }
}

#[test]
fn a_read_before_the_wait_is_a_race_naming_reader_buffer_and_writer() {
    let team = team(2, EMULATED_LIMIT);
    let mut mail = Mail::new(&team);
    let e = mail.send_then_read(&team, mode::READ_BEFORE_WAIT).unwrap_err();
    let errors = e.device_errors();
    assert_eq!(errors.len(), 1, "{e}");
    let (rank, block, thread, buffer, writer, line) = race_of(&errors[0]);
    assert_eq!((rank, block, thread), (1, [0, 0, 0], [0, 0, 0]));
    assert_eq!((buffer, writer, line), (&inbox_element(0), WRITER, line_of("// READ-BEFORE-WAIT")));
    let msg = e.to_string();
    assert!(msg.contains("element 0 of `inbox` (rank 1's copy)") && msg.contains("rank 0 block [0, 0, 0]"), "{msg}");
    assert!(!e.is_timeout());
}

#[test]
fn a_wait_on_a_signal_raised_before_the_put_is_a_race() {
    let team = team(2, EMULATED_LIMIT);
    let mut mail = Mail::new(&team);
    let e = mail.send_then_read(&team, mode::WRONG_SIGNAL).unwrap_err();
    let (rank, _, thread, buffer, writer, line) = race_of(&e.device_errors()[0]);
    assert_eq!((rank, thread, buffer, writer), (1, [0, 0, 0], &inbox_element(0), WRITER));
    assert_eq!(line, line_of("// READ-AFTER-WRONG-WAIT"));
}

#[test]
fn a_relaxed_flag_publishes_nothing_so_the_read_is_a_race() {
    let team = team(2, EMULATED_LIMIT);
    let mut mail = Mail::new(&team);
    let e = mail.send_then_read(&team, mode::RELAXED_FLAG).unwrap_err();
    let (rank, _, _, buffer, _, line) = race_of(&e.device_errors()[0]);
    assert_eq!((rank, buffer, line), (1, &inbox_element(0), line_of("// READ-AFTER-RELAXED-WAIT")));
}

#[test]
fn threads_that_do_not_share_the_leaders_wait_race_and_the_leader_does_not() {
    let team = team(2, EMULATED_LIMIT);
    let mut mail = Mail::new(&team);
    let e = mail.send_then_read(&team, mode::BLOCK_WITHOUT_BARRIER).unwrap_err();
    let errors = e.device_errors();
    // Threads 1..32 each race (the buffer keeps the first few records and counts the rest).
    assert!(!errors.is_empty());
    if let Error::Device(all) = &e {
        assert_eq!(errors.len() as u64 + all.lost(), LEN as u64 - 1, "{e}");
    }
    for d in errors {
        let (rank, _, thread, buffer, writer, line) = race_of(d);
        assert_eq!((rank, writer, line), (1, WRITER, line_of("// BLOCK-READ")));
        assert_ne!(thread[0], 0, "thread 0 waited itself");
        assert_eq!(buffer, &inbox_element(thread[0] as usize));
    }
}

#[test]
fn reads_ordered_after_the_put_are_not_flagged() {
    let team = team(2, EMULATED_LIMIT);
    let mut mail = Mail::new(&team);
    for how in [mode::WAIT_THEN_READ, mode::BLOCK_AFTER_BARRIER] {
        mail.pad.reset().unwrap();
        mail.send_then_read(&team, how).unwrap_or_else(|e| panic!("mode {how}: {e}"));
        let out = mail.out.to_host(1).unwrap();
        let n = if how == mode::WAIT_THEN_READ { 1 } else { LEN };
        assert!((0..n).all(|i| out[i] == 100 + i as u32), "mode {how}: {out:?}");
    }
}

#[test]
fn a_team_built_without_the_checker_runs_the_planted_race_unreported() {
    let team = Team::builder()
        .backend(Backend::Emulator)
        .world(2)
        .timeout(EMULATED_LIMIT)
        .emulator_checker(false)
        .build()
        .unwrap();
    let mut mail = Mail::new(&team);
    mail.send_then_read(&team, mode::READ_BEFORE_WAIT).unwrap();
}

fn run_overwrite(team: &Team, mail: &mut Mail, how: u32) -> Result<(), Error> {
    let cfg = LaunchConfig::new(1, 32);
    overwrite_source::launch(team, cfg, &mut mail.src, &mut mail.inbox, how)?.wait()
}

#[test]
fn a_source_rewritten_before_quiet_is_reported_with_both_buffers() {
    let team = team(2, EMULATED_LIMIT);
    let mut mail = Mail::new(&team);
    let mut src = mail.src.to_host(0).unwrap();
    let e = run_overwrite(&team, &mut mail, 1).unwrap_err();
    match e.device_errors() {
        [DeviceError::SourceOverwritten { at, source_byte, destination, quieted, location }] => {
            assert_eq!((at.rank, at.block, at.thread, *quieted), (0, [0, 0, 0], [0, 0, 0], true));
            assert!(matches!(source_byte, BufferRef::Element { owner: 0, index: 0, .. }), "{source_byte}");
            assert_eq!(destination, &inbox_element(0));
            assert_eq!(location.line, line_of("// PUT-THEN-QUIET"));
        }
        other => panic!("expected one overwritten source, got {other:?}"),
    }
    // Never quieted: found when the thread ends.
    mail.src.copy_from_host(0, &src).unwrap();
    let e = run_overwrite(&team, &mut mail, 2).unwrap_err();
    match e.device_errors() {
        [DeviceError::SourceOverwritten { quieted: false, location, .. }] => {
            assert_eq!(location.line, line_of("// PUT-NEVER-QUIETED"));
            assert!(e.to_string().contains("never quieted"), "{e}");
        }
        other => panic!("expected one overwritten source, got {other:?}"),
    }
    // Rewritten after the token's quiet(): correct.
    src[0] = 100;
    mail.src.copy_from_host(0, &src).unwrap();
    run_overwrite(&team, &mut mail, 0).unwrap();
    assert_eq!(mail.inbox.to_host(1).unwrap()[0], 100, "the put carried the value from before the rewrite");
}

fn run_raise_and_wait(team: &Team, pad: &SignalPadBuffer, index: u32, value: u64, want: u64) -> Result<(), Error> {
    raise_and_wait::launch(team, LaunchConfig::new(1, 32), pad, index, value, want)?.wait()
}

#[test]
fn a_wait_on_a_signal_no_rank_raises_is_diagnosed_as_unraised() {
    let team = team(2, EMULATED_HANG);
    let pad = SignalPadBuffer::new(&team, "flags", 2).unwrap();
    // Rank 0 raises signal 1; rank 1 waits on signal 0.
    let e = run_raise_and_wait(&team, &pad, 1, 1, 1).unwrap_err();
    match e.device_errors() {
        [DeviceError::UnraisedSignal { at, signal, expected, observed, location, .. }] => {
            assert_eq!((at.rank, at.block, at.thread, *expected, *observed), (1, [0, 0, 0], [0, 0, 0], 1, 0));
            assert_eq!(*signal, SignalRef::Pad { name: "flags".into(), owner: 1, index: 0 });
            assert_eq!(location.line, line_of("// UNRAISED-WAIT"));
        }
        other => panic!("expected an unraised signal, got {other:?}"),
    }
    assert!(e.is_timeout() && e.to_string().contains("which no rank raised"), "{e}");
}

#[test]
fn a_signal_raised_too_low_stays_a_timeout_and_a_raised_one_passes() {
    let team = team(2, EMULATED_HANG);
    let pad = SignalPadBuffer::new(&team, "flags", 2).unwrap();
    let e = run_raise_and_wait(&team, &pad, 0, 1, 2).unwrap_err();
    assert!(
        matches!(e.device_errors(), [DeviceError::Timeout { at, observed: 1, expected: 2, .. }] if at.rank == 1),
        "{e}"
    );
    run_raise_and_wait(&team, &pad, 0, 2, 2).unwrap();
}

fn run_pad_barrier(
    team: &Team,
    pad: &SignalPadBuffer,
    blocks: u32,
    skip_rank: u32,
    skip_block: u32,
) -> Result<(), Error> {
    pad_barrier::launch(team, LaunchConfig::new(blocks, 32), pad, skip_rank, skip_block)?.wait()
}

#[test]
fn a_rank_that_skips_the_barrier_epoch_is_a_barrier_mismatch() {
    let team = team(3, EMULATED_LIMIT);
    let pad = SignalPadBuffer::new(&team, "barrier", 3).unwrap();
    let e = run_pad_barrier(&team, &pad, 1, 1, NONE).unwrap_err();
    match e.device_errors() {
        [DeviceError::BarrierMismatch { rank: 1, block: None, pad, expected: 1, observed: 0, location: None }] => {
            assert_eq!(pad, "`barrier` (rank 1's copy)");
        }
        other => panic!("expected one barrier mismatch on rank 1, got {other:?}"),
    }
    assert!(e.to_string().contains("the other ranks advanced it 1"), "{e}");
    let epochs: Vec<u64> = (0..3).map(|r| pad.epochs(r).unwrap()[0]).collect();
    assert_eq!(epochs, [1, 0, 1], "what the finding is about");
}

#[test]
fn a_block_that_skips_advance_epoch_is_a_barrier_mismatch_on_every_rank() {
    let team = team(2, EMULATED_LIMIT);
    let pad = SignalPadBuffer::new(&team, "barrier", 2).unwrap();
    let e = run_pad_barrier(&team, &pad, 2, NONE, 1).unwrap_err();
    let mut ranks = Vec::new();
    for d in e.device_errors() {
        match d {
            DeviceError::BarrierMismatch {
                rank, block: Some([1, 0, 0]), expected: 1, observed: 0, location, ..
            } => {
                assert_eq!(location.as_ref().map(|l| l.line), Some(line_of("// ADVANCE")), "{d}");
                ranks.push(*rank);
            }
            other => panic!("expected block 1's barrier mismatch, got {other}"),
        }
    }
    ranks.sort_unstable();
    assert_eq!(ranks, [0, 1]);
}

#[test]
fn matched_signal_pad_barriers_run_clean_launch_after_launch() {
    let team = team(3, EMULATED_LIMIT);
    let pad = SignalPadBuffer::new(&team, "barrier", 3).unwrap();
    for _ in 0..3 {
        run_pad_barrier(&team, &pad, 2, NONE, NONE).unwrap();
    }
    assert!((0..3).all(|r| pad.epochs(r).unwrap().iter().all(|&e| e == 3)));
}

/// The device-level API: a team launch run by hand reports into each rank's error buffer, with the writer
/// of a race packed into the record; without the checker, the same bug goes unreported.
#[test]
fn team_launches_record_races_and_can_run_unchecked() {
    const WORLD: u32 = 2;
    let mut words = vec![[0u64; 4]; WORLD as usize];
    let mut flags = vec![[0u64; 1 + SIGNAL_PAD_EPOCH_SLOTS]; WORLD as usize];
    let data: Vec<*mut u64> = words.iter_mut().map(|w| w.as_mut_ptr()).collect();
    let pads: Vec<*mut u64> = flags.iter_mut().map(|f| f.as_mut_ptr()).collect();
    let raw = |table: &Vec<*mut u64>, rank: usize, len: usize| RawSym {
        peers: table.as_ptr().cast::<*mut u64>(),
        local: table[rank],
        len,
    };
    let (d, p) = (
        (0..2).map(|r| raw(&data, r, 4)).collect::<Vec<_>>(),
        (0..2).map(|r| raw(&pads, r, 1 + SIGNAL_PAD_EPOCH_SLOTS)).collect::<Vec<_>>(),
    );
    let kernel = || {
        let rank = team::rank() as usize;
        // SAFETY: live tables of two ranks; the pad has one signal and its epoch slots.
        let (data, pad) = unsafe { (SymSliceMut::from_raw(d[rank]), SignalPad::from_raw(p[rank])) };
        if rank == 0 {
            // SAFETY: in bounds.
            unsafe { data.peer(1).write(2, 42) };
            pad.peer(1, 0).set_release(1);
        } else {
            // SAFETY: in bounds (the bug: read before the wait).
            std::hint::black_box(unsafe { data.local().read(2) });
            pad.local(0).wait_ge(1);
        }
    };
    for checked in [true, false] {
        words.iter_mut().for_each(|w| *w = [0; 4]);
        flags.iter_mut().for_each(|f| *f = [0; 1 + SIGNAL_PAD_EPOCH_SLOTS]);
        let launch = TeamLaunch::with_checker(WORLD, [1, 1, 1], [1, 1, 1], 0, checked);
        assert_eq!(launch.is_checked(), checked);
        let mut errors = [ErrorBuffer::ZEROED, ErrorBuffer::ZEROED];
        std::thread::scope(|s| {
            for (rank, e) in errors.iter_mut().enumerate() {
                let ctx = LaunchCtx { rank: rank as u32, world: WORLD, timeout_ns: 10_000_000_000, errors: e };
                let (launch, kernel) = (launch.clone(), &kernel);
                s.spawn(move || launch.run_rank(ctx, kernel).unwrap());
            }
        });
        assert_eq!(errors[0].count, 0);
        if !checked {
            assert_eq!(errors[1].count, 0, "unchecked launches report nothing");
            continue;
        }
        let records: Vec<_> = errors[1].written_records().copied().collect();
        assert_eq!(records.len(), 1, "{records:?}");
        let r = records[0];
        assert_eq!((r.error_kind(), r.rank, r.block, r.thread), (Some(ErrorKind::Race), 1, [0, 0, 0], [0, 0, 0]));
        assert_eq!(r.signal, data[1] as u64 + 16, "element 2 of rank 1's copy");
        assert_eq!(ThreadRef::unpack(r.expected, r.observed), ThreadRef { rank: 0, block: [0; 3], thread: [0; 3] });
        assert_eq!(r.cmp, 8, "one u64 in conflict");
    }
    // Running a rank twice in one team launch is refused.
    let launch = TeamLaunch::new(1, [1, 1, 1], [1, 1, 1], 0);
    let ctx = LaunchCtx { rank: 0, world: 1, timeout_ns: 0, errors: std::ptr::null_mut() };
    launch.run_rank(ctx, &|| {}).unwrap();
    assert!(launch.run_rank(ctx, &|| {}).unwrap_err().to_string().contains("already ran"));
}
