"""torch SymmetricMemory all-reduce, one-shot and two-shot, as anchors for ferrocomm's all-reduce.

One process per GPU under torchrun:

    torchrun --standalone --nproc-per-node 2 symm_mem.py [--repeats 3]

For each size (bf16, 1 KiB .. 256 MiB, the sweep of the committed reports) and each algorithm:

* one-shot: ``torch.ops.symm_mem.one_shot_all_reduce_out(buf, "sum", group, out)``: every rank reads
  every peer's whole buffer and sums locally;
* two-shot: ``torch.ops.symm_mem.two_shot_all_reduce_(buf, "sum", group)``: reduce-scatter then
  all-gather, in place.

``buf`` is a view of one symmetric buffer (``symm_mem.empty`` + ``symm_mem.rendezvous``) on the CUDA
backend; multicast is off (TORCH_SYMM_MEM_DISABLE_MULTICAST=1), so no multimem/NVLS path is used.
Each size is checked once (every rank's buffer holds rank + 1; the sum must be world(world+1)/2).

Timing: ``k`` calls are captured into one CUDA graph and the graph is replayed ``r`` times between two
CUDA events (warm replays first), so the figure is the per-call time in graph replay, launch cost out.
Each rank times itself; the printed time is the MAX over ranks (an all_reduce(MAX) of the per-rank
times over the gloo group), as nccl-tests reports. busbw = algbw * 2(n-1)/n.

Output, one line per size, algorithm and repeat (bench/anchors.rs reads it):

    torch symm_mem.one_shot all_reduce bf16 1024 B graph world 2: 6.50 us max over ranks  algbw 0.16 GB/s  busbw 0.16 GB/s

With ``--gpu N`` every rank runs on GPU N and each line says ``[shared-gpu N]`` before the colon: a probe
of whether the algorithms run at all when ranks share a GPU, not a figure to compare.

A size an algorithm rejects prints ``... world 2: failed (<error>)`` and the sweep goes on.
"""

import argparse
import os
import sys
import time

os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
os.environ.setdefault("NCCL_NVLS_ENABLE", "0")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.distributed._symmetric_memory as symm_mem  # noqa: E402

SIZES = [1024, 8192, 65536, 262144, 1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20]
DTYPE = torch.bfloat16


def calls_for(nbytes):
    """Calls per timed trial: about 20 ms of work at a rough 10 us + 150 GB/s, at least 10."""
    est_us = 10.0 + nbytes / 150e3
    return max(10, min(1000, int(20000.0 / est_us)))


def max_over_ranks(value, group):
    t = torch.tensor([value], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    return t.item()


def shared_gpu_tag(ordinal, group):
    """` [shared-gpu N]` when two ranks sit on one GPU (a probe, not an anchor), else nothing."""
    props = torch.cuda.get_device_properties(ordinal)
    mine = (getattr(props, "pci_bus_id", None), getattr(props, "pci_device_id", None), str(getattr(props, "uuid", "")))
    every = [None] * dist.get_world_size(group)
    dist.all_gather_object(every, mine, group=group)
    return f" [shared-gpu {ordinal}]" if len(set(every)) < len(every) else ""


def time_graph(fn, calls, stream):
    """Per-call µs of `fn` captured `k` times into a CUDA graph, replayed until `calls` calls ran."""
    k = min(calls, 50)
    replays = max(1, (calls + k - 1) // k)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream):
        fn()  # the eager warm-up a capture wants (lazy state, workspace)
    stream.synchronize()
    with torch.cuda.graph(graph, stream=stream):
        for _ in range(k):
            fn()
    graph.replay()
    graph.replay()
    torch.cuda.synchronize()
    return graph, k, replays


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3, help="timed trials per size and algorithm")
    parser.add_argument("--max-bytes", type=int, default=SIZES[-1], help="largest size to run")
    parser.add_argument(
        "--gpu", type=int, help="put every rank on this GPU (a probe of ranks sharing one GPU) instead of LOCAL_RANK"
    )
    args = parser.parse_args()

    ordinal = args.gpu if args.gpu is not None else int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(ordinal)
    device = torch.device("cuda", ordinal)
    # gloo carries the bootstrap and the MAX over ranks; the collectives under test are symm_mem's own.
    dist.init_process_group(backend="gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    group = dist.group.WORLD
    group_name = group.group_name
    placement = shared_gpu_tag(ordinal, group)
    if hasattr(symm_mem, "set_backend"):
        try:
            symm_mem.set_backend("CUDA")
        except Exception as exc:  # an older or newer torch without the choice: its default stands
            print(f"# symm_mem.py: set_backend('CUDA') not applied: {exc}", file=sys.stderr)
    if hasattr(symm_mem, "enable_symm_mem_for_group"):
        symm_mem.enable_symm_mem_for_group(group_name)

    sizes = [s for s in SIZES if s <= args.max_bytes]
    numel_max = max(sizes) // DTYPE.itemsize
    buf_all = symm_mem.empty(numel_max, dtype=DTYPE, device=device)
    try:
        symm_mem.rendezvous(buf_all, group_name)
    except RuntimeError as exc:  # e.g. two ranks on one GPU: the CUDA backend refuses overlapping devices
        print(f"# symm_mem.py: rank {rank} on GPU {ordinal}: rendezvous failed: {' '.join(str(exc).split())[:600]}",
              flush=True)
        raise SystemExit(3)
    out_all = torch.empty(numel_max, dtype=DTYPE, device=device)
    stream = torch.cuda.Stream()
    if rank == 0:
        print(
            f"# symm_mem.py: torch {torch.__version__}, {world} ranks, GPU {torch.cuda.get_device_name(device)}; "
            f"CUDA-graph replay, per-call time, max over ranks, {args.repeats} repeats; "
            f"TORCH_SYMM_MEM_DISABLE_MULTICAST={os.environ.get('TORCH_SYMM_MEM_DISABLE_MULTICAST')}",
            flush=True,
        )

    one_shot_out = getattr(torch.ops.symm_mem, "one_shot_all_reduce_out", None)
    for nbytes in sizes:
        n = nbytes // DTYPE.itemsize
        buf, out = buf_all[:n], out_all[:n]
        if one_shot_out is not None:
            one_shot = lambda: one_shot_out(buf, "sum", group_name, out)  # noqa: E731
        else:
            one_shot = lambda: torch.ops.symm_mem.one_shot_all_reduce(buf, "sum", group_name)  # noqa: E731
        two_shot = lambda: torch.ops.symm_mem.two_shot_all_reduce_(buf, "sum", group_name)  # noqa: E731
        for name, fn, result in (("one_shot", one_shot, out), ("two_shot", two_shot, buf)):
            head = f"torch symm_mem.{name} all_reduce bf16 {nbytes} B graph world {world}{placement}"
            error = None
            try:
                buf.fill_(rank + 1)
                torch.cuda.synchronize()
                dist.barrier()
                got = fn()
                if name == "one_shot" and one_shot_out is None:
                    result = got
                torch.cuda.synchronize()
                want = world * (world + 1) / 2
                lo, hi = result.float().min().item(), result.float().max().item()
                if lo != want or hi != want:
                    error = f"wrong sum: {lo}..{hi}, want {want}"
            except Exception as exc:  # the size is past what the algorithm takes, or it is unsupported
                error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            # Every rank learns whether any rank failed, so none waits in a collective the others skip.
            failed = max_over_ranks(1.0 if error else 0.0, group)
            if failed:
                if rank == 0:
                    print(f"{head}: failed ({error or 'on another rank'})", flush=True)
                continue
            # Zeros from here on: the in-place two-shot keeps them zero, however often it runs.
            buf.zero_()
            torch.cuda.synchronize()
            calls = calls_for(nbytes)
            graph, k, replays = time_graph(fn, calls, stream)
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            for _ in range(args.repeats):
                dist.barrier()
                with torch.cuda.stream(stream):
                    start.record(stream)
                    for _ in range(replays):
                        graph.replay()
                    stop.record(stream)
                stop.synchronize()
                us = start.elapsed_time(stop) * 1000.0 / (k * replays)
                us = max_over_ranks(us, group)
                if rank == 0:
                    algbw = nbytes / us / 1e3
                    busbw = algbw * 2 * (world - 1) / world
                    print(
                        f"{head}: {us:.2f} us max over ranks  algbw {algbw:.2f} GB/s  busbw {busbw:.2f} GB/s",
                        flush=True,
                    )
            del graph
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    t0 = time.time()
    main()
    if int(os.environ.get("RANK", "0")) == 0:
        print(f"# symm_mem.py: done in {time.time() - t0:.1f} s", flush=True)
