"""Times ferrocomm's all-reduce called from PyTorch, for the Python report (``run.sh`` runs it beside the Rust
benchmark in one session). Run under torchrun, one process per rank:

    torchrun --nproc-per-node 2 bench/python/bench_ops.py --out python.json

Per size (bf16, in place on a symmetric tensor, as the Rust benchmark's all-reduce), the median over trials of:
- ``graph``: a ferrocomm barrier and ``iters`` calls captured in one ``torch.cuda.graph``, replayed; CUDA
  events around the replay, less those around a replay of the barrier alone, divided by ``iters`` (the Rust
  benchmark's graph figure times the calls after a barrier with stamp kernels);
- ``eager``: each call followed by ``torch.cuda.synchronize()``, host wall time per call (the Rust benchmark's
  eager figure also waits for every call on the host);
- ``eager-stream``: ``iters`` calls back to back on the stream, one synchronize at the end, per call;
- ``graph-staged``: the graph figure for an ordinary tensor (copied through ferrocomm's staging buffer);
- ``symm-mem-one-shot`` / ``symm-mem-two-shot``: torch's own symmetric-memory all-reduce in a graph, where
  it runs (else the reason it did not).
Rank 0 writes the JSON; every rank's figures are its own, rank 0's are reported.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import torch
import torch.distributed as dist

import ferrocomm


def parse_size(text: str) -> int:
    units = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "B": 1}
    for unit, factor in units.items():
        if text.endswith(unit):
            return int(text[: -len(unit)]) * factor
    return int(text)


def median_of(trials):
    return {"median_us": statistics.median(trials), "min_us": min(trials), "max_us": max(trials)}


def lockstep():
    torch.cuda.synchronize()
    dist.barrier()


def replay_us(graph):
    """CUDA events around one replay of ``graph``, after the ranks' hosts met, in µs."""
    lockstep()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    graph.replay()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1000


def capture(body):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        body()
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        body()
    graph.replay()
    torch.cuda.synchronize()
    return graph


def time_graph(call, iters, trials):
    """Per operation: a graph of a ferrocomm barrier and ``iters`` calls, less a graph of the barrier alone.
    The barrier takes up the processes' skew (each replays its own graph when its host gets there), as the
    Rust benchmark's barrier before its first stamp does; the subtraction takes out the barrier and the
    replay's own launch."""

    def ops():
        ferrocomm.barrier()
        for _ in range(iters):
            call()

    full, base = capture(ops), capture(ferrocomm.barrier)
    out = []
    for _ in range(trials):
        out.append((replay_us(full) - replay_us(base)) / iters)
    return out


def time_eager(call, iters, trials, wait_each):
    """Host µs per call of ``iters`` calls: each waited for (``wait_each``), or back to back on the stream with
    one wait at the end."""
    out = []
    for _ in range(trials):
        lockstep()
        t0 = time.perf_counter()
        for _ in range(iters):
            call()
            if wait_each:
                torch.cuda.synchronize()
        torch.cuda.synchronize()
        out.append((time.perf_counter() - t0) * 1e6 / iters)
    return out


def symm_mem_series(nbytes, dtype, iters, trials):
    """torch's symmetric-memory one-shot and two-shot all-reduce, in a graph, or why they did not run."""
    try:
        import torch.distributed._symmetric_memory as symm_mem

        n = nbytes // torch.tensor([], dtype=dtype).element_size()
        t = symm_mem.empty(n, dtype=dtype, device=torch.device("cuda", torch.cuda.current_device()))
        group = dist.group.WORLD.group_name
        symm_mem.rendezvous(t, group)
        t.fill_(1)
    except Exception as e:  # noqa: BLE001 (record why it does not run here)
        reason = f"did not run: {type(e).__name__}: {e}".splitlines()[0]
        return {"symm-mem-one-shot": reason, "symm-mem-two-shot": reason}
    found = {}
    for name, call in (
        ("symm-mem-one-shot", lambda: torch.ops.symm_mem.one_shot_all_reduce(t, "sum", group)),
        ("symm-mem-two-shot", lambda: torch.ops.symm_mem.two_shot_all_reduce_(t, "sum", group)),
    ):
        try:
            found[name] = median_of(time_graph(call, iters, trials))
        except Exception as e:  # noqa: BLE001
            found[name] = f"did not run: {type(e).__name__}: {e}".splitlines()[0]
    return found


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--sizes", default="8KiB,1MiB,16MiB")
    p.add_argument("--iters", type=int, default=50)
    p.add_argument("--trials", type=int, default=7)
    p.add_argument("--out", default="python.json")
    a = p.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)) % torch.cuda.device_count())
    session = ferrocomm.init()
    dtype = torch.bfloat16
    results = {}
    for text in a.sizes.split(","):
        nbytes = parse_size(text)
        n = nbytes // 2
        sym = ferrocomm.empty(n, dtype)
        sym.fill_(1)
        ordinary = torch.ones(n, dtype=dtype, device="cuda")
        iters = max(2, min(a.iters, (1 << 30) // max(nbytes, 1)))
        row = {
            "graph": median_of(time_graph(lambda: ferrocomm.all_reduce(sym), iters, a.trials)),
            "eager": median_of(time_eager(lambda: ferrocomm.all_reduce(sym), iters, a.trials, wait_each=True)),
            "eager-stream": median_of(time_eager(lambda: ferrocomm.all_reduce(sym), iters, a.trials, wait_each=False)),
            "graph-staged": median_of(time_graph(lambda: ferrocomm.all_reduce(ordinary), iters, a.trials)),
        }
        row.update(symm_mem_series(nbytes, dtype, iters, a.trials))
        results[str(nbytes)] = row
        session.check_errors()
        if rank == 0:
            print(text, json.dumps(row), flush=True)
    meta = {
        "world": dist.get_world_size(),
        "dtype": "bf16",
        "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name(),
        "mps": os.path.exists(os.path.join(os.environ.get("CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps"), "control")),
        "date": time.strftime("%Y-%m-%d"),
    }
    if rank == 0:
        with open(a.out, "w") as f:
            json.dump({"meta": meta, "results": results}, f, indent=1)
    ferrocomm.shutdown()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
