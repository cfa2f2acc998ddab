"""NCCL through torch.distributed: all_reduce, all_gather_into_tensor and all_to_all_single, each timed in
CUDA-graph replay and eagerly, as anchors for ferrocomm's collectives.

One process per GPU under torchrun:

    torchrun --standalone --nproc-per-node 2 nccl_torch.py [--repeats 3]

Sizes follow ferrocomm's definitions (host/bench/src/model.rs, Operation):

* all_reduce: ``bytes`` is the buffer each rank holds (sum, in place);
* all_gather: ``bytes`` is the gathered output; each rank contributes bytes / world;
* all_to_all: ``bytes`` is one rank's send buffer; it sends bytes / world to each rank, itself included.

all bf16, over the all-reduce sweep of the committed reports (1 KiB .. 256 MiB) and the all-to-all
token sizes (1 .. 16384 tokens x 7168 bf16).

Timing, per operation and size:

* graph: ``k`` calls captured into one CUDA graph (torch.cuda.graph), the graph replayed ``r`` times
  between two CUDA events after warm replays; the figure is elapsed / (k r): launch cost out;
* eager: the same number of calls launched one by one between two CUDA events: launch cost in.

Each rank times itself; the printed time is the MAX over ranks (an all_reduce(MAX) of the per-rank
times), as nccl-tests reports. Bus bandwidth uses NCCL's factors: 2(n-1)/n all-reduce, (n-1)/n others.
NVLS (NVLink SHARP, multicast) is off: NCCL_NVLS_ENABLE=0.

Output, one line per operation, size, mode and repeat (bench/anchors.rs reads it):

    torch nccl all_reduce bf16 1024 B graph world 2: 9.16 us max over ranks  algbw 0.11 GB/s  busbw 0.11 GB/s
    torch nccl all_reduce bf16 1024 B eager world 2: 14.02 us max over ranks  algbw 0.07 GB/s  busbw 0.07 GB/s

``--gpu N`` puts every rank on GPU N (a probe: NCCL refuses two ranks on one GPU, and the error it
gives is printed as ``# nccl_torch.py: ... failed: ...``).
"""

import argparse
import os
import sys
import time

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

DTYPE = torch.bfloat16
ALL_REDUCE_SIZES = [1024, 8192, 65536, 262144, 1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20]
TOKEN_SIZES = [t * 7168 * DTYPE.itemsize for t in (1, 8, 128, 1024, 4096, 16384)]
SIZES = sorted(set(ALL_REDUCE_SIZES + TOKEN_SIZES))
OPS = ("all_reduce", "all_gather", "all_to_all")


def calls_for(nbytes):
    """Calls per timed trial: about 20 ms of work at a rough 10 us + 150 GB/s, at least 10."""
    est_us = 10.0 + nbytes / 150e3
    return max(10, min(1000, int(20000.0 / est_us)))


def bus_factor(op, world):
    return 2 * (world - 1) / world if op == "all_reduce" else (world - 1) / world


def make_op(op, nbytes, world, device):
    """The call under test and its buffers; None when `nbytes` does not split into world equal parts."""
    n = nbytes // DTYPE.itemsize
    if op == "all_reduce":
        x = torch.zeros(n, dtype=DTYPE, device=device)
        return lambda: dist.all_reduce(x)
    if n % world:
        return None
    if op == "all_gather":
        out = torch.empty(n, dtype=DTYPE, device=device)
        inp = torch.zeros(n // world, dtype=DTYPE, device=device)
        return lambda: dist.all_gather_into_tensor(out, inp)
    send = torch.zeros(n, dtype=DTYPE, device=device)
    recv = torch.empty(n, dtype=DTYPE, device=device)
    return lambda: dist.all_to_all_single(recv, send)


def check(world, rank, device):
    """One small call of each operation, checked, so a wrong setup fails loudly before any timing."""
    x = torch.full((1024,), float(rank + 1), dtype=torch.float32, device=device)
    dist.all_reduce(x)
    want = world * (world + 1) / 2
    assert x.min().item() == want and x.max().item() == want, "all_reduce sum is wrong"
    out = torch.empty(world * 4, dtype=torch.float32, device=device)
    dist.all_gather_into_tensor(out, torch.full((4,), float(rank), dtype=torch.float32, device=device))
    assert out.view(world, 4)[:, 0].tolist() == [float(r) for r in range(world)], "all_gather is wrong"
    send = torch.arange(world, dtype=torch.float32, device=device) + 100 * rank
    recv = torch.empty(world, dtype=torch.float32, device=device)
    dist.all_to_all_single(recv, send)
    assert recv.tolist() == [100.0 * r + rank for r in range(world)], "all_to_all is wrong"
    torch.cuda.synchronize()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3, help="timed trials per operation, size and mode")
    parser.add_argument("--max-bytes", type=int, default=SIZES[-1], help="largest size to run")
    parser.add_argument("--ops", default=",".join(OPS), help="comma-separated subset of " + ",".join(OPS))
    parser.add_argument("--modes", default="graph,eager", help="graph, eager or both")
    parser.add_argument("--gpu", type=int, help="put every rank on this GPU (a probe) instead of LOCAL_RANK")
    args = parser.parse_args()
    ops = [o for o in args.ops.split(",") if o]
    modes = [m for m in args.modes.split(",") if m]
    if any(o not in OPS for o in ops) or any(m not in ("graph", "eager") for m in modes):
        parser.error("unknown operation or mode")

    ordinal = args.gpu if args.gpu is not None else int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(ordinal)
    device = torch.device("cuda", ordinal)
    rank = int(os.environ.get("RANK", "0"))
    try:
        # device_id: the communicator is made here, eagerly, so a refused setup fails here.
        dist.init_process_group(backend="nccl", device_id=device)
        rank, world = dist.get_rank(), dist.get_world_size()
        check(world, rank, device)
    except Exception as exc:
        print(
            f"# nccl_torch.py: rank {rank} on GPU {ordinal}: NCCL setup or first collective failed: "
            f"{type(exc).__name__}: {' '.join(str(exc).split())[:600]}",
            flush=True,
        )
        raise SystemExit(3)
    if rank == 0:
        print(
            f"# nccl_torch.py: torch {torch.__version__}, NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}, "
            f"{world} ranks, GPU {torch.cuda.get_device_name(device)}; modes {','.join(modes)}; per-call time, "
            f"max over ranks, {args.repeats} repeats; NCCL_NVLS_ENABLE={os.environ.get('NCCL_NVLS_ENABLE')}",
            flush=True,
        )

    stream = torch.cuda.Stream()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    maxed = torch.zeros(1, dtype=torch.float64, device=device)
    for op in ops:
        for nbytes in (s for s in SIZES if s <= args.max_bytes):
            fn = make_op(op, nbytes, world, device)
            if fn is None:
                continue
            calls = calls_for(nbytes)
            for mode in modes:
                head = f"torch nccl {op} bf16 {nbytes} B {mode} world {world}"
                if mode == "graph":
                    k = min(calls, 50)
                    replays = max(1, (calls + k - 1) // k)
                    with torch.cuda.stream(stream):
                        fn()  # eager warm-up before capture
                    stream.synchronize()
                    graph = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(graph, stream=stream):
                        for _ in range(k):
                            fn()
                    run = lambda: [graph.replay() for _ in range(replays)]  # noqa: E731
                    per_trial = k * replays
                else:
                    run = lambda: [fn() for _ in range(calls)]  # noqa: E731
                    per_trial = calls
                with torch.cuda.stream(stream):
                    run()  # warm
                stream.synchronize()
                for _ in range(args.repeats):
                    torch.cuda.synchronize()
                    dist.barrier(device_ids=[ordinal])
                    torch.cuda.synchronize()
                    with torch.cuda.stream(stream):
                        start.record(stream)
                        run()
                        stop.record(stream)
                    stop.synchronize()
                    maxed.fill_(start.elapsed_time(stop) * 1000.0 / per_trial)
                    dist.all_reduce(maxed, op=dist.ReduceOp.MAX)
                    us = maxed.item()
                    if rank == 0:
                        algbw = nbytes / us / 1e3
                        busbw = algbw * bus_factor(op, world)
                        print(
                            f"{head}: {us:.2f} us max over ranks  algbw {algbw:.2f} GB/s  busbw {busbw:.2f} GB/s",
                            flush=True,
                        )
                if mode == "graph":
                    del graph
    dist.barrier(device_ids=[ordinal])
    dist.destroy_process_group()


if __name__ == "__main__":
    t0 = time.time()
    main()
    if int(os.environ.get("RANK", "0")) == 0:
        print(f"# nccl_torch.py: done in {time.time() - t0:.1f} s", flush=True)
    sys.exit(0)
