"""The torch path, run by hand where torch is installed (pytest does not collect it): eager calls,
``torch.ops.custom_kernel``, ``torch.compile(fullgraph=True)``, and on a GPU a ``torch.cuda.graph`` replayed
with new inputs and ferrocomm's all-reduce on the same session; then the refusals. Alone, the process is a
ring of one that puts into its own inbox; under torchrun each process is one rank of the ring.

    python tests/torch_check.py cuda                              # one GPU
    torchrun --nproc-per-node 2 tests/torch_check.py cuda         # two ranks (on one GPU: an MPS daemon)
    python tests/torch_check.py emulator                          # torch CPU tensors on the emulator
"""

import os
import sys

import torch

import custom_kernel
import ferrocomm

N = 1000


def data(rank: int, dev: str) -> torch.Tensor:
    """Rank `rank`'s input: small integers, exact in float32 products and sums."""
    return ((torch.arange(N, device=dev, dtype=torch.float32) * 7 + rank * 13) % 23) - 11


def main(mode: str) -> None:
    if mode == "cuda":
        if "LOCAL_RANK" in os.environ:
            torch.cuda.set_device(int(os.environ["LOCAL_RANK"]) % torch.cuda.device_count())
        s, dev = custom_kernel.init(), "cuda"
    else:
        s, dev = custom_kernel.init(backend="emulator", world=1), "cpu"
    print(s, flush=True)
    rank, world = s.rank, s.world
    inbox = ferrocomm.empty((N,), dtype=torch.float32, library="torch")
    # What this rank sends, and what it receives from its predecessor in the ring.
    src, prev = data(rank, dev), data((rank + world - 1) % world, dev)

    custom_kernel.scaled_put(src, inbox, 0.5)
    acc = torch.ones(N, device=dev)
    custom_kernel.accumulate(acc, inbox)
    ferrocomm.synchronize()
    assert torch.equal(inbox, prev * 0.5) and torch.equal(acc, 1 + prev * 0.5)
    print("eager: ok", flush=True)

    torch.ops.custom_kernel.scaled_put(src * 2, inbox, 1.0)
    torch.ops.custom_kernel.accumulate(acc, inbox)
    ferrocomm.synchronize()
    assert torch.equal(inbox, prev * 2) and torch.equal(acc, 1 + prev * 2.5)
    print("torch.ops.custom_kernel: ok", flush=True)

    @torch.compile(fullgraph=True)
    def step(x, inbox, acc):
        custom_kernel.scaled_put(x * 3, inbox, 0.5)
        custom_kernel.accumulate(acc, inbox)
        return acc * 2

    acc.zero_()
    step(src, inbox, acc)
    out = step(src, inbox, acc)
    ferrocomm.synchronize()
    assert torch.equal(acc, prev * 3.0) and torch.equal(out, acc * 2)
    print("torch.compile: ok", flush=True)

    if dev == "cuda":
        static = src.clone()
        acc.zero_()
        # The session's ring is allocated by its first scaled_put, above: nothing is allocated while capturing.
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            custom_kernel.scaled_put(static, inbox, 2.0)
            custom_kernel.accumulate(acc, inbox)  # an ordinary tensor: staged in and out, in the graph too
        for k in range(5):
            static.copy_(src + k)
            graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(acc, sum((prev + k) * 2 for k in range(5)))
        print("torch.cuda.graph: ok", flush=True)
        ferrocomm.all_reduce(acc)
        torch.cuda.synchronize()
        everyone = [sum((data(r, dev) + k) * 2 for k in range(5)) for r in range(world)]
        assert torch.equal(acc, sum(everyone))
        print("ferrocomm.all_reduce on the same session: ok", flush=True)

    refusals = [
        (ferrocomm.SymmetricRequiredError, lambda: custom_kernel.scaled_put(src, torch.zeros(N, device=dev))),
        (ferrocomm.RequirementError, lambda: custom_kernel.scaled_put(src.half(), inbox)),
        (
            ferrocomm.RequirementError,
            lambda: custom_kernel.scaled_put(src, ferrocomm.empty((N - 1,), dtype=torch.float32, library="torch")),
        ),
    ]
    for error, call in refusals:
        try:
            call()
        except error as e:
            print(f"refused ({type(e).__name__}): {e}", flush=True)
        else:
            raise AssertionError(f"not refused: expected {error.__name__}")
    custom_kernel.scaled_put(src, inbox, 1.0)
    ferrocomm.synchronize()
    assert torch.equal(inbox, prev)
    print(f"rank {rank} of {world}, {mode}: every check passed", flush=True)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "cuda")
