//! The tensor-parallel decode step — `out = rmsnorm(all-reduce(x[tokens, K/world] · W[K/world, H]) +
//! residual) · gamma` in bf16 — verified and timed from CUDA-graph replays: the GEMV alone, with the HBM
//! bandwidth it reaches, then the whole step in two kernels (GEMV, then the all-reduce fused with the
//! residual and the norm) and in one (each block pushes its finished tile), beside the layer as separate
//! kernels with NCCL's all-reduce between them (variant 1: one process per GPU, e.g. under
//! `ferrocomm launch -n 2 --`) and with the library's.
//!
//! ```sh
//! cargo run --release --example tp_decode
//! cargo run --release --example tp_decode -- --tokens 1,4,16 --hidden 8192,7168 --out report
//! ```
//!
//! Each shape prints the GEMV alone (and the HBM bandwidth it reaches), the library's all-reduce of the
//! step's output alone, and the step by each variant; `--out DIR` writes them as a report.

use std::process::ExitCode;

use clap::Parser;
use ferrocomm::{Backend, Team};
use ferrocomm_examples::all_reduce::GraphRuns;
use ferrocomm_examples::nccl::NcclAllReduce;
use ferrocomm_examples::tp_decode::{
    ShapeReport, StepVariant, all_reduce_alone, gemv, report_csv, report_markdown, step,
};
use ferrocomm_examples::{ExampleError, Platform, open_team};
use ferrocomm_kernels::{Communicator, TpShape};

/// The split-K GEMV of tensor-parallel decode on every GPU present (or the CPU emulator).
#[derive(Debug, Parser)]
struct Args {
    /// Tokens per step, comma-separated (1 ..= 16).
    #[arg(long, value_delimiter = ',', default_values_t = [1, 4, 16])]
    tokens: Vec<usize>,
    /// Hidden sizes (H = K), comma-separated [default: 8192,7168 on GPUs; 264 on the emulator].
    #[arg(long, value_delimiter = ',')]
    hidden: Vec<usize>,
    /// Ranks [default: the job's, or every GPU, or two ranks on a single GPU]; `--world 1` gives one GPU's
    /// GEMV the whole GPU.
    #[arg(long)]
    world: Option<usize>,
    /// The step's variants to time, comma-separated: nccl, three-kernels, two-kernels, fused [default:
    /// every one that runs here].
    #[arg(long, value_delimiter = ',')]
    variants: Vec<StepVariant>,
    /// Time the GEMV alone (for tuning it: `FERROCOMM_TUNING=tp_blocks_per_sm=8`).
    #[arg(long, conflicts_with = "out")]
    gemv_only: bool,
    /// Also write the report (README.md, data.csv) into this folder.
    #[arg(long)]
    out: Option<std::path::PathBuf>,
}

fn run(args: &Args) -> Result<(), ExampleError> {
    let team = match args.world {
        Some(world) => Team::builder().world(world).build()?,
        None => open_team()?,
    };
    let platform = Platform::of(&team).to_string();
    print!("{platform}");
    let mut comm = Communicator::new(&team)?;
    // Variant 1 needs NCCL, one process per GPU; where it cannot run, the report says why.
    let (nccl, nccl_missing) = match args.gemv_only {
        true => (None, None),
        false => match NcclAllReduce::open(&team)? {
            Ok(nccl) => (Some(nccl), None),
            Err(why) => {
                println!("NCCL variant left out: {why}");
                (None, Some(why.to_string()))
            }
        },
    };
    // On the emulator one replay of a one-step graph, after the check: a launch of these kernels (a host
    // thread per GPU thread, a warp round per `mma.sync`) takes seconds there, and its times are not GPU times.
    let runs = match team.backend() {
        Backend::Cuda => GraphRuns::for_team(&team),
        Backend::Emulator => GraphRuns { ops_per_graph: 1, warmup: 0, replays: 1 },
    };
    let hidden = match (args.hidden.is_empty(), team.backend()) {
        (false, _) => args.hidden.clone(),
        (true, Backend::Cuda) => vec![8192, 7168],
        (true, Backend::Emulator) => vec![264],
    };
    let mut shapes = Vec::new();
    for (i, &h) in hidden.iter().enumerate() {
        for &tokens in &args.tokens {
            let shape = TpShape { tokens, hidden: h, k: h };
            let seed = i as u64;
            let g = gemv(&mut comm, shape, runs, seed)?;
            println!("GEMV alone        {}", g.line());
            if args.gemv_only {
                continue;
            }
            let all_reduce = all_reduce_alone(&mut comm, shape, runs, seed)?;
            println!("all-reduce alone  {} x {} bf16: {:>10.2} us   verified", tokens, h, all_reduce.median_us());
            let mut steps = Vec::new();
            let chosen = |v: &StepVariant| args.variants.is_empty() || args.variants.contains(v);
            let runs_here = |v: &StepVariant| *v != StepVariant::Nccl || nccl.is_some();
            for variant in StepVariant::ALL.into_iter().filter(chosen).filter(runs_here) {
                let s = step(&mut comm, shape, variant, nccl.as_ref(), runs, seed)?;
                println!("step              {}", s.line());
                steps.push(s);
            }
            shapes.push(ShapeReport { gemv: g, all_reduce, steps });
        }
    }
    if let Some(dir) = &args.out {
        let write = |name: &str, text: String| {
            std::fs::create_dir_all(dir)
                .and_then(|()| std::fs::write(dir.join(name), text))
                .map_err(|e| ExampleError::BadArgument(format!("cannot write {}: {e}", dir.join(name).display())))
        };
        let ranks_per_gpu = shapes.first().map_or(1, |s| s.gemv.ranks_per_gpu);
        let arguments = std::env::args().skip(1).collect::<Vec<_>>().join(" ");
        write(
            "README.md",
            report_markdown(&arguments, &platform, (team.world(), ranks_per_gpu), nccl_missing.as_deref(), &shapes),
        )?;
        write("data.csv", report_csv(&shapes))?;
        println!("report: {}", dir.join("README.md").display());
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
