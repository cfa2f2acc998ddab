//! Launching a kernels crate of one's own (`examples/custom_kernel`, crate `custom-kernel`) through the
//! typed launchers `#[kernel]` generated for it: `scaled_put::launch(&team, cfg, &src, &mut inbox, &pad,
//! scale)` mirrors `fn scaled_put(src: &[f32], inbox: SymSliceMut<f32>, pad: SignalPad, scale: f32)`, and
//! the buffers stay borrowed until the returned guard has waited.

use custom_kernel::{MAX_BLOCKS, PAD_SIGNALS, accumulate, reference, scaled_put};
use ferrocomm::{Backend, LaunchConfig, SignalPadBuffer, SymBuffer, Team};

use crate::error::{ExampleError, check_equal};
use crate::timing::{Timing, time_replays};

/// What [`run_custom_kernel`] runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CustomPlan {
    /// Elements of each rank's vector.
    pub len: usize,
    /// The factor `scaled_put` applies.
    pub scale: f32,
    /// Graph replays of one ring step (put + accumulate) with new inputs each time, verified.
    pub steps: usize,
    /// The launch: the same grid on every rank, at most `MAX_BLOCKS` blocks.
    pub launch: LaunchConfig,
}

impl CustomPlan {
    /// On GPUs: 1 Mi elements. On the emulator: 1000 elements. Launches as [`CustomPlan::with_len`].
    pub fn for_team(team: &Team) -> CustomPlan {
        let len = match team.backend() {
            Backend::Cuda => 1 << 20,
            Backend::Emulator => 1000,
        };
        CustomPlan::with_len(team, len)
    }

    /// `len` elements per rank. On GPUs: 256-thread blocks, one per 256 elements up to `MAX_BLOCKS` (the
    /// kernels loop over the rest), 20 verified steps. On the emulator: two blocks of one warp, 4 steps.
    pub fn with_len(team: &Team, len: usize) -> CustomPlan {
        let (launch, steps) = match team.backend() {
            Backend::Cuda => (LaunchConfig::new(len.div_ceil(256).clamp(1, MAX_BLOCKS) as u32, 256), 20),
            Backend::Emulator => (LaunchConfig::new(2, 32), 4),
        };
        CustomPlan { len, scale: 0.5, steps, launch }
    }
}

/// The outcome of [`run_custom_kernel`]: every check passed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CustomReport {
    /// The plan that ran.
    pub plan: CustomPlan,
    /// Time per ring step (both kernels) from graph replays.
    pub step: Timing,
}

/// Rank `rank`'s input for step `step`: small integers and halves, exact in `f32` sums.
fn input(rank: usize, step: usize, len: usize) -> Vec<f32> {
    (0..len).map(|i| ((i * 7 + rank * 13 + step * 5) % 23) as f32 - 11.0).collect()
}

/// Runs the custom kernels on `team` and checks each result against `custom_kernel::reference`:
/// one `scaled_put` (every rank's inbox holds its predecessor's scaled vector), one `accumulate`, then a
/// CUDA graph of the ring step replayed `steps` times with new inputs before each replay, then timed.
pub fn run_custom_kernel(team: &Team, plan: &CustomPlan) -> Result<CustomReport, ExampleError> {
    let world = team.world();
    let (len, scale, cfg) = (plan.len, plan.scale, plan.launch);
    if cfg.blocks() > MAX_BLOCKS as u64 {
        return Err(ExampleError::BadArgument(format!(
            "scaled_put runs at most {MAX_BLOCKS} blocks (one data signal each); the launch has {}",
            cfg.blocks()
        )));
    }
    let inputs: Vec<Vec<f32>> = (0..world).map(|rank| input(rank, 0, len)).collect();
    // Every process knows every rank's input (for the references) and writes its own ranks'.
    let local = team.local_ranks();
    let mut src = SymBuffer::<f32>::new(team, len)?;
    for &rank in &local {
        src.copy_from_host(rank, &inputs[rank])?;
    }
    let mut inbox = SymBuffer::<f32>::new(team, len)?;
    let mut acc = SymBuffer::<f32>::new(team, len)?;
    let pad = SignalPadBuffer::new(team, "custom_kernel.ring", PAD_SIGNALS)?;

    // One launch of each, through the typed launchers.
    scaled_put::launch(team, cfg, &src, &mut inbox, &pad, scale)?.wait()?;
    let mut received = reference::scaled_put(&inputs, scale);
    for &rank in &local {
        check_equal("scaled_put: the inbox", rank, &received[rank], &inbox.to_host(rank)?)?;
    }
    accumulate::launch(team, cfg, &mut acc, &inbox)?.wait()?;
    let mut sums = received.clone();
    for &rank in &local {
        check_equal("accumulate: the sum", rank, &sums[rank], &acc.to_host(rank)?)?;
    }

    // The ring step as a graph: the signals' epochs live on the device, so replays need no reset.
    let graph = team.capture(|team| {
        scaled_put::launch(team, cfg, &src, &mut inbox, &pad, scale)?.wait()?;
        accumulate::launch(team, cfg, &mut acc, &inbox)?.wait()
    })?;
    for step in 1..=plan.steps {
        let inputs: Vec<Vec<f32>> = (0..world).map(|rank| input(rank, step, len)).collect();
        for &rank in &local {
            src.copy_from_host(rank, &inputs[rank])?;
        }
        graph.replay()?.wait()?;
        received = reference::scaled_put(&inputs, scale);
        sums = sums.iter().zip(&received).map(|(sum, x)| reference::accumulate(sum, x, 1)).collect();
    }
    for &rank in &local {
        check_equal(&format!("{} graph replays: the sum", plan.steps), rank, &sums[rank], &acc.to_host(rank)?)?;
    }

    // Back to back, as a framework queues work: no host wait between the replays, so only the READY signal
    // keeps a rank from storing into an inbox that its successor's previous `accumulate` may still read,
    // and only the data signals order the stores before the successor's next `accumulate`.
    for _ in 0..plan.steps {
        graph.replay()?.leave_in_stream();
    }
    team.synchronize()?;
    sums = sums.iter().zip(&received).map(|(sum, x)| reference::accumulate(sum, x, plan.steps)).collect();
    for &rank in &local {
        check_equal(&format!("{} replays back to back: the sum", plan.steps), rank, &sums[rank], &acc.to_host(rank)?)?;
    }

    // Timed replays on the last inputs; the sums keep growing by the same amounts.
    let (warmup, replays) = (2, plan.steps.max(3));
    let step = time_replays(&graph, 1, warmup, replays)?;
    for &rank in &local {
        let want = reference::accumulate(&sums[rank], &received[rank], warmup + replays);
        check_equal("timed graph replays: the sum", rank, &want, &acc.to_host(rank)?)?;
    }
    Ok(CustomReport { plan: *plan, step })
}
