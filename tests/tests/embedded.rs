//! ferrocomm embedded in a framework that owns its memory, streams and graphs (the way PyTorch, candle or
//! mistral.rs would call it): written once, run on the emulator (in CI) and on the GPUs.
//!
//! The caller allocates the input and output (plain host memory on the emulator, cudarc allocations on a
//! GPU); they reach the all-reduce through stream-ordered copies into and out of a symmetric buffer
//! (`SymBuffer::copy_from_caller` / `copy_to_caller`), and every guard is left in the stream, as a
//! framework's eager op does. On GPUs the caller also owns the streams (cudarc's, in the primary context)
//! and captures the calls into graphs of its own (`cuStreamBeginCapture` in global mode, as
//! `torch.cuda.graph` does), then replays them 100 times with new inputs: the signal pads' device-side
//! epochs keep every replay correct without a reset.

use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
use cudarc::driver::{CudaContext, CudaSlice, CudaStream, DevicePtr, result};
use ferrocomm::{Backend, Error, ExternalStream, LaunchConfig, SignalPadBuffer, SymBuffer, Team, system};
use ferrocomm_kernels::{Communicator, Op};
use ferrocomm_runtime_kernels::host as kernels;
use ferrocomm_tests::EMULATED_HANG;

const REQUIRE_ENV: &str = "FERROCOMM_REQUIRE_GPUS";
/// Sizes that catch edge cases: one element, odd, unaligned tails, more than one block's share (and more
/// than the LL path carries, so the one-shot and two-shot run too on GPUs).
const SIZES: [usize; 5] = [1, 7, 1000, 33_333, 300_000];

fn input(rank: usize, n: usize, round: usize) -> Vec<f32> {
    (0..n).map(|i| ((i * 7 + rank * 3 + round * 5) % 17) as f32 - 8.0).collect()
}

fn expected(world: usize, n: usize, round: usize) -> Vec<f32> {
    let inputs: Vec<Vec<f32>> = (0..world).map(|r| input(r, n, round)).collect();
    (0..n).map(|i| inputs.iter().map(|x| x[i]).sum()).collect()
}

/// One all-reduce of the caller's memory: copy in, reduce in place, copy out, all left in stream order.
fn all_reduce_caller_memory(
    team: &Team,
    comm: &mut Communicator<'_>,
    stage: &mut SymBuffer<f32>,
    inputs: &[u64],
    outputs: &[u64],
    n: usize,
) -> Result<(), Box<dyn std::error::Error>> {
    for (slot, rank) in team.local_ranks().into_iter().enumerate() {
        // SAFETY: the caller's allocations of `n` f32s, alive until the test has synchronised.
        let src = unsafe { team.caller_memory(rank, inputs[slot], n * 4) }?;
        stage.copy_from_caller(&src)?.leave_in_stream();
    }
    // SAFETY: the only use of the alias is this call's all-reduce; `stage` is idle meanwhile.
    let mut work = unsafe { stage.alias::<f32>(n) }?;
    comm.all_reduce(&mut work, Op::Sum)?.leave_in_stream();
    for (slot, rank) in team.local_ranks().into_iter().enumerate() {
        // SAFETY: as above.
        let dst = unsafe { team.caller_memory(rank, outputs[slot], n * 4) }?;
        stage.copy_to_caller(&dst)?.leave_in_stream();
    }
    Ok(())
}

#[test]
fn caller_memory_on_the_emulator() {
    let team = Team::builder().backend(Backend::Emulator).world(2).build().expect("emulated team");
    let mut comm = Communicator::new(&team).expect("communicator");
    let mut stage = SymBuffer::<f32>::new(&team, *SIZES.iter().max().unwrap()).unwrap();
    // The emulator's launches cost a host thread per GPU thread: sizes up to one block's share beyond the
    // LL path, two rounds (the second reuses the epochs).
    for n in [1, 7, 1000, 4099] {
        for round in 0..2 {
            let ins: Vec<Vec<f32>> = (0..2).map(|r| input(r, n, round)).collect();
            let mut outs = vec![vec![0f32; n]; 2];
            let in_addrs: Vec<u64> = ins.iter().map(|v| v.as_ptr() as u64).collect();
            let out_addrs: Vec<u64> = outs.iter_mut().map(|v| v.as_mut_ptr() as u64).collect();
            all_reduce_caller_memory(&team, &mut comm, &mut stage, &in_addrs, &out_addrs, n).unwrap();
            // Left in stream order: nothing is known to have run until the team is waited for.
            team.synchronize().unwrap();
            for out in &outs {
                assert_eq!(out, &expected(2, n, round), "n = {n}, round {round}");
            }
        }
    }
}

#[test]
fn the_emulator_has_no_streams_to_bind() {
    let team = Team::builder().backend(Backend::Emulator).world(1).build().unwrap();
    // SAFETY: never launched on: the binding is refused.
    let stream = unsafe { ExternalStream::from_raw(std::ptr::null_mut()) };
    match team.bind_stream(stream) {
        Err(Error::ForeignStream { rank: 0, reason, .. }) => assert!(reason.contains("no CUDA streams"), "{reason}"),
        other => panic!("expected ForeignStream, got {other:?}"),
    }
}

#[test]
fn launches_left_in_stream_report_their_errors_later() {
    // A wait on a signal nobody raises, left in the stream as a framework's eager op is: the launch returns
    // at once, and the timeout comes back from the next check_errors (as torch reports a failed kernel at a
    // later call), naming the rank and the signal. The team keeps working.
    let team = Team::builder().backend(Backend::Emulator).world(2).timeout(EMULATED_HANG).build().unwrap();
    let pad = SignalPadBuffer::new(&team, "never", 2).unwrap();
    team.check_errors().unwrap();
    kernels::wait_unraised(&team, LaunchConfig::new(1, 32), &pad).unwrap().leave_in_stream();
    let deadline = Instant::now() + Duration::from_secs(30);
    let e = loop {
        match team.check_errors() {
            Err(e) => break e,
            Ok(()) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Ok(()) => panic!("the timed-out wait never came back from check_errors"),
        }
    };
    assert!(e.is_timeout() && e.to_string().contains("signal `never`[1] (rank 0's copy)"), "{e}");
    assert!(team.check_errors().is_ok(), "the error is reported once");
    let mut comm = Communicator::new(&team).unwrap();
    let mut buf = SymBuffer::<f32>::from_host(&team, &[1.0; 16]).unwrap();
    comm.all_reduce(&mut buf, Op::Sum).unwrap().leave_in_stream();
    // A host read waits for the launch left in the stream first.
    assert_eq!(buf.to_host(1).unwrap(), [2.0; 16]);
}

/// A team on the GPUs, or `None` (with a visible message) when there is no GPU.
fn gpu_team(test: &str) -> Option<Team> {
    let present = system::driver().map(|d| d.gpu_count).unwrap_or(0);
    if let Ok(v) = std::env::var(REQUIRE_ENV) {
        let need: usize = v.trim().parse().unwrap_or_else(|_| panic!("{REQUIRE_ENV}={v:?} is not a number"));
        assert!(present >= need, "{REQUIRE_ENV}={need} but {present} GPU(s) are usable");
    }
    if present == 0 {
        eprintln!("skipped: no GPU for {test}");
        return None;
    }
    Some(Team::builder().backend(Backend::Cuda).world(2).build().expect("GPU team"))
}

/// The caller's side on a GPU: its own stream per rank and its own allocations, in the primary contexts.
struct Caller {
    streams: Vec<Arc<CudaStream>>,
    inputs: Vec<CudaSlice<f32>>,
    outputs: Vec<CudaSlice<f32>>,
}

impl Caller {
    fn new(team: &Team, n: usize) -> Caller {
        let mut c = Caller { streams: vec![], inputs: vec![], outputs: vec![] };
        for rank in team.local_ranks() {
            let ferrocomm::Device::Cuda { ordinal } = team.device(rank).unwrap() else { unreachable!() };
            let stream = CudaContext::new(ordinal).unwrap().new_stream().unwrap();
            c.inputs.push(stream.alloc_zeros::<f32>(n).unwrap());
            c.outputs.push(stream.alloc_zeros::<f32>(n).unwrap());
            c.streams.push(stream);
        }
        c
    }

    fn addresses(&self, of: &[CudaSlice<f32>]) -> Vec<u64> {
        of.iter().zip(&self.streams).map(|(s, stream)| s.device_ptr(stream).0).collect()
    }

    fn write_inputs(&mut self, n: usize, round: usize) {
        for (rank, (slice, stream)) in self.inputs.iter_mut().zip(&self.streams).enumerate() {
            stream.memcpy_htod(&input(rank, n, round), slice).unwrap();
        }
    }

    fn check_outputs(&self, n: usize, round: usize) {
        for (rank, (slice, stream)) in self.outputs.iter().zip(&self.streams).enumerate() {
            let got = stream.clone_dtoh(slice).unwrap();
            assert_eq!(got, expected(self.streams.len(), n, round), "rank {rank}, n = {n}, round {round}");
        }
    }

    fn bind<'t>(&self, team: &'t Team) -> ferrocomm::StreamBinding<'t> {
        team.bind_streams(self.streams.iter().map(ExternalStream::from_cudarc).collect()).unwrap()
    }
}

/// The caller's graph of one stream. Every stream's capture is ended before any graph is instantiated: in
/// global mode an instantiation while another stream of the thread still captures is refused
/// (`CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED`), which is why this test does not use cudarc's `end_capture`.
struct CallerGraph {
    stream: Arc<CudaStream>,
    exec: cudarc::driver::sys::CUgraphExec,
}

impl CallerGraph {
    fn end_captures(streams: &[Arc<CudaStream>]) -> Vec<CallerGraph> {
        let graphs: Vec<_> = streams
            .iter()
            // SAFETY: each stream is capturing (begun by this thread), in the current (primary) context.
            .map(|s| unsafe { result::stream::end_capture(s.cu_stream()) }.unwrap())
            .collect();
        graphs
            .into_iter()
            .zip(streams)
            .map(|(graph, stream)| {
                // SAFETY: a graph just captured; the executable graph no longer needs it once instantiated.
                let exec = unsafe { result::graph::instantiate(graph, CUgraphInstantiate_flags(0)) }.unwrap();
                // SAFETY: as above.
                unsafe { result::graph::destroy(graph) }.unwrap();
                CallerGraph { stream: Arc::clone(stream), exec }
            })
            .collect()
    }

    fn launch(&self) {
        // SAFETY: instantiated from a capture in the stream's context.
        unsafe { result::graph::launch(self.exec, self.stream.cu_stream()) }.unwrap();
    }
}

impl Drop for CallerGraph {
    fn drop(&mut self) {
        self.stream.synchronize().unwrap();
        // SAFETY: instantiated above, and its last launch has finished.
        unsafe { result::graph::exec_destroy(self.exec) }.unwrap();
    }
}

#[test]
fn caller_streams_memory_and_graphs_on_gpus() {
    let Some(team) = gpu_team("caller_streams_memory_and_graphs_on_gpus") else { return };
    let mut comm = Communicator::new(&team).unwrap();
    let mut stage = SymBuffer::<f32>::new(&team, *SIZES.iter().max().unwrap()).unwrap();
    for n in SIZES {
        let mut caller = Caller::new(&team, n);
        let (ins, outs) = (caller.addresses(&caller.inputs), caller.addresses(&caller.outputs));

        // Eager, on the caller's streams: ordered after the caller's input copies, before its reads.
        caller.write_inputs(n, 0);
        {
            let _bound = caller.bind(&team);
            all_reduce_caller_memory(&team, &mut comm, &mut stage, &ins, &outs, n).unwrap();
        }
        caller.check_outputs(n, 0);
        team.check_errors().unwrap();

        // Captured by the caller (global mode, as torch.cuda.graph), then replayed with new inputs.
        for s in &caller.streams {
            s.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL).unwrap();
        }
        {
            let _bound = caller.bind(&team);
            all_reduce_caller_memory(&team, &mut comm, &mut stage, &ins, &outs, n).unwrap();
        }
        let graphs = CallerGraph::end_captures(&caller.streams);
        for round in 1..=100 {
            caller.write_inputs(n, round);
            for g in &graphs {
                g.launch();
            }
            // Every replay is checked at the small sizes; at the large ones every 25th (the copies back
            // to the host dominate the test's time).
            if n <= 1000 || round % 25 == 0 {
                caller.check_outputs(n, round);
            }
        }
        for s in &caller.streams {
            s.synchronize().unwrap();
        }
        team.check_errors().unwrap();
    }
}

#[test]
fn a_stream_of_another_context_is_refused() {
    let Some(team) = gpu_team("a_stream_of_another_context_is_refused") else { return };
    let ferrocomm::Device::Cuda { ordinal } = team.device(0).unwrap() else { unreachable!() };
    // A context of its own (not the primary one): its streams cannot carry the team's launches.
    let mut dev = 0;
    // SAFETY: writes one device handle for a valid ordinal (the team opened it).
    unsafe { cudarc::driver::sys::cuDeviceGet(&mut dev, ordinal as i32) }.result().unwrap();
    let mut ctx = std::ptr::null_mut();
    // SAFETY: creates a fresh context on a valid device; destroyed below.
    unsafe { cudarc::driver::sys::cuCtxCreate_v4(&mut ctx, std::ptr::null_mut(), 0, dev) }.result().unwrap();
    let mut stream = std::ptr::null_mut();
    // SAFETY: `ctx` is current (cuCtxCreate makes it so).
    unsafe { cudarc::driver::sys::cuStreamCreate(&mut stream, 1) }.result().unwrap();
    // SAFETY: live until destroyed below; the binding is refused, so nothing is queued on it.
    let foreign = unsafe { ExternalStream::from_raw(stream) };
    let refused = team.bind_streams(vec![foreign.clone(), foreign]);
    // SAFETY: created above and unused.
    unsafe {
        cudarc::driver::sys::cuStreamDestroy_v2(stream);
        cudarc::driver::sys::cuCtxDestroy_v2(ctx);
    }
    match refused {
        Err(Error::ForeignStream { rank: 0, reason, .. }) => assert!(reason.contains("primary context"), "{reason}"),
        other => panic!("expected ForeignStream, got {other:?}"),
    }
}

#[test]
fn caller_memory_on_another_device_or_the_host_is_refused() {
    let Some(team) = gpu_team("caller_memory_on_another_device_or_the_host_is_refused") else { return };
    let host = [0f32; 16];
    // SAFETY: only checked, never used: the check refuses host memory.
    match unsafe { team.caller_memory(0, host.as_ptr() as u64, 64) } {
        Err(Error::CallerMemory { rank: 0, reason }) => {
            assert!(reason.contains("not memory the CUDA driver knows"), "{reason}")
        }
        other => panic!("expected CallerMemory, got {other:?}"),
    }
}
