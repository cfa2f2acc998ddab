//! The report's README.md: headline table, crossover summary, per-operation plots and tables, what was
//! not measured, and the method.

use std::fmt::Write as _;

use crate::crossover;
use crate::model::{BenchData, Measurement};
use crate::report::plot::PlotKind;
use crate::report::table::{self, Figure};

/// `YYYY-MM-DD HH:MM UTC` from seconds since the Unix epoch (proleptic Gregorian calendar).
pub fn format_utc(unix_s: u64) -> String {
    let days = (unix_s / 86_400) as i64;
    let (hour, minute) = ((unix_s % 86_400) / 3600, (unix_s % 3600) / 60);
    // Days to civil date (H. Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02} {hour:02}:{minute:02} UTC")
}

const METHOD: &str = "\
- **What an operation is, in every mode.** An operation is done when its data is in the receivers' memory \
and each receiver's stream can use it. Ping-pong: a hop ends when the receiver has seen the data and only \
then sends it back. Put: rank 0's message is in rank 1's memory and rank 1 knows it — gpu: the library's \
put (a ready handshake so the destination may be overwritten, the stores, a release that waits for the write \
acknowledgements, and rank 1's acquire wait); proxy: the kernel's descriptor, the proxy's copy-engine copy and \
the signal raised after it, on which rank 1's kernel waits; cpu: `cuMemcpyPeerAsync` on rank 0's stream, then \
an event recorded after it that rank 1's stream waits on; nccl: a grouped send and receive (the receive \
completes on rank 1's stream). All-reduce, all-gather, all-to-all: every rank holds the result.
- Each mode is first checked once per operation against a CPU reference on small known inputs; a mode \
that fails is reported under *Not measured* instead of producing figures.
- **Two series per point.** *Back to back* (streaming throughput, the *median/min/max µs* columns): warm-up \
operations, then timed trials of operations issued back to back (fewer per trial for large messages, see \
*iterations* in the data); the median, min and max over trials of the time per operation. *Isolated* (the \
*isolated µs* column and the isolated plots): operations one at a time, each between a one-thread clock-stamp \
kernel before it and one after it on every rank's stream (the stamps never start the next launch early, as \
a collective sits between two dependent compute kernels); an operation's time is the longest rank's span \
between its stamps, as nccl-tests reports the slowest rank; the median over the operations. gpu and nccl \
capture the isolated operations into a CUDA graph, cpu and nccl-eager launch them from the host; the proxy \
mode times one put per launch inside its kernel (from the first descriptor to the receiver's \
acknowledgement, so one extra GPU-to-GPU flag).
- GPU time, back to back: CUDA events around the operations for cpu and nccl; the GPUs' own `%globaltimer` \
for gpu and proxy (stamp kernels around the captured operations, or the kernel that loops over a trial's \
operations itself: see the notes below). The *graph* column says which points were timed as CUDA-graph \
replay: gpu and nccl replay graphs, nccl-eager and cpu launch from the host (the host issuing each copy is \
the CPU-initiated path). The CPU-initiated ping-pong is timed with the host clock, since the host takes part \
in every hop.
- Ping-pong times are one way (half a round trip); put is one direction, GPU 0 to GPU 1.
- Sizes: the all-reduce buffer; the whole gathered buffer for all-gather; one rank's send buffer for \
all-to-all; the message for ping-pong and put.
- Bandwidth: algbw = size / time; busbw follows NCCL's convention (nccl-tests): all-reduce × 2(n−1)/n, \
all-gather and all-to-all × (n−1)/n, ping-pong and put × 1.
- Host CPU µs/op: user + system CPU time of the whole process during the timed trials, as the sum of every \
thread's own CPU clock (proxy threads and the driver's included; the scheduler's accounting to the \
nanosecond, which the process-wide clocks are not for threads running on other cores), less what the \
measuring thread spent only waiting for each trial's end, divided by the operations. The CPU-initiated ping-pong keeps its waits: the host \
waiting on every hop is that mode's cost.
- Utilization (`--utilization`): after a point's trials and 0.3 s of idle, more back-to-back trials for a \
second or more inside one NVML window: *SM active %* is GPM's SM activity (the share of SM time with a warp \
resident, averaged over the run's GPUs; NVML's counters lag by up to about 0.17 s), *NVLink GB/s* the NVLink \
payload bytes sent and received over the window per second (– where NVML does not expose the counters).
- Anchor rows were measured by other programs (torch, NCCL through torch, CUDA C++) in the same session and \
read from their output; their min and max are over repeated lines, when the output repeats a figure.
";

/// The warning that opens a report of the one-GPU run.
pub const INTRA_GPU_BANNER: &str = "\
> **One GPU: every figure here is intra-GPU.** The ranks share one GPU (two ranks on it), so their data never \
crosses NVLink: puts and collectives move through the GPU's own memory, and the ranks' kernels share its \
SMs. These figures compare the modes' overheads (launch, synchronisation, protocol), not link bandwidth; NCCL \
does not run two ranks on one GPU. The two-GPU report is the one to read for NVLink figures.
";

/// The warning that opens a report of one rank talking to itself (the nvshmem mode's one PE, and the
/// `self 1 PE` anchors).
pub const ONE_RANK_BANNER: &str = "\
> **One rank: every figure here is intra-GPU.** NVSHMEM runs one PE per process, and on its own the bench \
is one PE: its puts and ping-pongs go to itself and its collectives move one PE's data, through the GPU's own \
memory, never over NVLink (busbw, which counts traffic between ranks, is 0). These figures are the cost of \
the path (launch, NVSHMEM's put-with-signal, signal polls, quiet), beside NVSHMEM's own figures for one PE \
where the anchors have them. Under a launcher (`ferrocomm launch -n N -- ferrocomm bench --modes nvshmem`) \
each process is a PE.
";

/// The Method paragraph on the `gpu-procs` series, when the data has it.
pub const PROCS_METHOD: &str = "\
- gpu-procs (ferrocomm gpu, one process per GPU): the gpu mode's collectives with one process per rank, \
started by a launcher (`ferrocomm launch -n N -- ferrocomm bench ...`, `torchrun --no-python --nproc-per-node \
N ferrocomm bench ...`, mpirun, srun); the processes join one team, map each other's symmetric memory and \
run the same sweep, each launching the library's kernels for its own rank only. Each process captures its \
rank's calls of a trial into its own CUDA graph, between the same two %globaltimer stamp kernels as gpu, \
after a device barrier of every rank (the processes replay their graphs independently; the barrier lines \
the ranks up before the first stamp, outside the timed span). Each rank times itself: a process reads only \
its own rank's stamps, and the figures are rank 0's (every rank of a collective ends within one NVLink trip \
of the others), where gpu takes the longest span over the ranks. Host CPU µs/op is rank 0's process's. \
Only rank 0 writes the report; a single-process run's points join it with `--merge DATA.json` (the notes \
below name the files merged).
";

/// The devices of a run, ranks that share a GPU said once: "0: NVIDIA H200 (2 ranks)".
pub fn describe_devices(devices: &[String]) -> String {
    let mut groups: Vec<(&str, usize)> = Vec::new();
    for device in devices {
        match groups.last_mut() {
            Some((last, n)) if *last == device.as_str() => *n += 1,
            _ => groups.push((device, 1)),
        }
    }
    let parts: Vec<String> =
        groups.into_iter().map(|(d, n)| if n == 1 { d.to_owned() } else { format!("{d} ({n} ranks)") }).collect();
    parts.join(", ")
}

/// The README of a report folder whose plots are named by [`PlotKind::file_name`] and whose data files
/// are `data.json` and `data.csv`. `plots` lists the plot files that were drawn.
pub fn readme(data: &BenchData, plots: &[String]) -> String {
    let meta = &data.meta;
    let has_procs = data.measurements.iter().any(|m| m.series().is_procs());
    let mut out = String::from("# ferrocomm bench\n\n");
    let mut when = format!("Measured {}", format_utc(meta.created_unix_s));
    if !meta.devices.is_empty() {
        when += &format!(" on {}", describe_devices(&meta.devices));
    }
    let mut taken = vec![when];
    if let Some(driver) = &meta.driver {
        taken.push(format!("CUDA driver {driver}"));
    }
    if let Some(nccl) = &meta.nccl {
        taken.push(format!("NCCL {nccl}"));
    }
    let _ = writeln!(out, "{}.", taken.join("; "));
    if !meta.command.is_empty() {
        let _ = writeln!(out, "\nCommand: `{}`", meta.command);
    }
    if !meta.tool.is_empty() {
        let _ = writeln!(out, "\nTool: {}.", meta.tool);
    }

    let intra_gpu: Vec<&Measurement> = data.measurements.iter().filter(|m| m.intra_gpu).collect();
    if !intra_gpu.is_empty() {
        let one_rank = intra_gpu.iter().all(|m| m.world == 1);
        let _ = write!(out, "\n{}", if one_rank { ONE_RANK_BANNER } else { INTRA_GPU_BANNER });
    }

    let (headers, rows) = table::headline(data, Figure::BackToBack);
    if !rows.is_empty() {
        let headers: Vec<&str> = headers.iter().map(String::as_str).collect();
        let _ = write!(
            out,
            "\n## Headline: back to back\n\n{}\nMedian time per operation issued back to back (streaming; and bus \
             bandwidth from 16 MiB up) of each mode's best variant. *gpu vs best other*: the best other series' \
             median over gpu's — above 1, gpu is faster.{}\n",
            table::markdown_table(&headers, &rows),
            if has_procs {
                " *gpu-procs vs gpu*: how much longer the gpu-procs median is than gpu's, in percent (from twice \
                 as long up, the factor); the gpu column and *gpu vs best other* leave gpu-procs out."
            } else {
                ""
            }
        );
    }

    let (headers, rows) = table::headline(data, Figure::Isolated);
    if !rows.is_empty() {
        let headers: Vec<&str> = headers.iter().map(String::as_str).collect();
        let _ = write!(
            out,
            "\n## Headline: isolated\n\n{}\nMedian time of one operation between dependent kernels, complete on \
             every rank (the slowest rank's), of each mode's best variant: what a collective costs between two \
             compute kernels of a model. Same comparison as above.\n",
            table::markdown_table(&headers, &rows)
        );
    }

    let summary = crossover::summary(data);
    if !summary.is_empty() {
        out += "\n## Who wins where\n";
        for (op, lines) in summary {
            let _ = writeln!(out, "\n**{}**\n", op.title());
            for line in lines {
                let _ = writeln!(out, "- {line}");
            }
        }
        if let Some(tuning) = crate::recommend::tuning_file(data) {
            let _ = write!(
                out,
                "\n**Recommendation** ([{0}]({0}); `FERROCOMM_TUNING_FILE={0}` makes a `Communicator` load its \
                 thresholds):\n\n```text\n{tuning}```\n",
                crate::report::TUNING_FILE
            );
        }
    }

    if let Some(section) = crate::report::trace_overhead::section(data) {
        out += &section;
    }

    for op in data.operations() {
        let _ = writeln!(out, "\n## {}\n", table::caption(data, op));
        let utilization = crate::report::utilization_plot::file_name(op.name());
        if plots.contains(&utilization) {
            let _ = writeln!(out, "![{} utilization]({utilization})", op.name());
        }
        for kind in [PlotKind::Latency, PlotKind::Isolated, PlotKind::Bandwidth] {
            let file = kind.file_name(op);
            if plots.contains(&file) {
                let alt = match kind {
                    PlotKind::Latency => "time per operation, back to back",
                    PlotKind::Isolated => "time per operation, isolated",
                    PlotKind::Bandwidth => "bus bandwidth",
                };
                let _ = writeln!(out, "![{} {alt}]({file})", op.name());
            }
        }
        let cells: Vec<Vec<String>> = table::rows(data, op).into_iter().map(|m| table::row_for(data, m)).collect();
        let _ = write!(out, "\n{}", table::markdown_table(&table::headers(data), &cells));
    }

    if !data.skipped.is_empty() {
        out += "\n## Not measured\n\n";
        let rows = table::skipped_rows(data);
        out += &table::markdown_table(&["operations", "mode", "size", "reason"], &rows);
    }

    let _ = write!(out, "\n## Method\n\n{METHOD}");
    if has_procs {
        out += PROCS_METHOD;
    }
    for note in &meta.notes {
        let _ = writeln!(out, "- {note}");
    }
    out += "\nData: [data.json](data.json) (the whole run; `ferrocomm bench --from data.json --out DIR` redraws \
            this report), [data.csv](data.csv).\n";
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_gpus_are_named_once() {
        let two = ["0: NVIDIA H200".to_owned(), "1: NVIDIA H200".to_owned()];
        assert_eq!(describe_devices(&two), "0: NVIDIA H200, 1: NVIDIA H200");
        let shared = ["0: NVIDIA H200".to_owned(), "0: NVIDIA H200".to_owned()];
        assert_eq!(describe_devices(&shared), "0: NVIDIA H200 (2 ranks)");
    }

    #[test]
    fn utc_dates() {
        assert_eq!(format_utc(0), "1970-01-01 00:00 UTC");
        assert_eq!(format_utc(951_782_400), "2000-02-29 00:00 UTC");
        assert_eq!(format_utc(1_796_041_800), "2026-11-30 12:30 UTC");
    }
}
