"""The PyTorch checks, for the GPU machine (CI has no torch): run under torchrun, one process per rank,

    torchrun --nproc-per-node 2 host/python/tests/torch_check.py [--quick]

(two processes on one GPU need an MPS daemon to run side by side). Every collective at awkward sizes and
in every element type, on ordinary and on symmetric tensors, against a CPU reference: in eager mode, inside
``torch.cuda.graph`` (replayed 100 times with new inputs), and under ``torch.compile``; then bad input. Each
process prints one ``PASS``/``FAIL`` line per check and exits non-zero if any failed.
"""

from __future__ import annotations

import os
import sys
import traceback

import torch
import torch.distributed as dist

import ferrocomm

QUICK = "--quick" in sys.argv
SIZES = [0, 1, 7, 33, 1000, 4099] if QUICK else [0, 1, 7, 33, 1000, 4099, 65_537, 1 << 20]
DTYPES = [torch.float32, torch.bfloat16, torch.float16]
REPLAYS = 100

failures: list[str] = []


def check(name):
    def run(f):
        try:
            f()
            print(f"[rank {RANK}] PASS {name}", flush=True)
        except Exception:  # noqa: BLE001 (report every failure, keep checking)
            failures.append(name)
            print(f"[rank {RANK}] FAIL {name}\n{traceback.format_exc()}", flush=True)
        return f

    return run


def data(rank: int, n: int, dtype, round: int = 0) -> torch.Tensor:
    """Small integers: exact in every dtype and in any summation order (so results compare exactly)."""
    i = torch.arange(n, dtype=torch.int64)
    return ((i * 7 + rank * 3 + round * 5) % 17 - 8).to(dtype)


def everyone(n, dtype, round=0):
    return [data(r, n, dtype, round) for r in range(WORLD)]


def same(got: torch.Tensor, want: torch.Tensor, what: str):
    got = got.detach().to("cpu").reshape(-1)
    want = want.detach().to("cpu").reshape(-1)
    if not torch.equal(got, want):
        bad = (got != want).nonzero()
        first = bad[0].item() if len(bad) else -1
        raise AssertionError(
            f"{what}: {len(bad)} of {want.numel()} elements differ, first at {first}: "
            f"got {got[first].item() if first >= 0 else None}, want {want[first].item() if first >= 0 else None}"
        )


dist.init_process_group("gloo")
RANK, WORLD = dist.get_rank(), dist.get_world_size()
torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", RANK)) % torch.cuda.device_count())
DEV = torch.device("cuda", torch.cuda.current_device())
S = ferrocomm.init()
assert (S.rank, S.world, S.backend) == (RANK, WORLD, "cuda"), S


def on_gpu(t):
    return t.to(DEV)


# --- eager --------------------------------------------------------------------------------------------------


@check("eager: every collective at every size and dtype, ordinary tensors")
def _():
    for dtype in DTYPES:
        for n in SIZES:
            x = on_gpu(data(RANK, n, dtype))
            ferrocomm.all_reduce(x)
            same(x, torch.stack(everyone(n, torch.float32)).sum(0).to(dtype), f"all_reduce {dtype} n={n}")

            out = torch.empty(WORLD * n, dtype=dtype, device=DEV)
            ferrocomm.all_gather_into_tensor(out, on_gpu(data(RANK, n, dtype)))
            same(out, torch.cat(everyone(n, dtype)), f"all_gather {dtype} n={n}")

            out = torch.empty(n, dtype=dtype, device=DEV)
            ferrocomm.reduce_scatter_tensor(out, on_gpu(data(RANK, WORLD * n, dtype)))
            red = torch.stack(everyone(WORLD * n, torch.float32)).sum(0).to(dtype)
            same(out, red[RANK * n : (RANK + 1) * n], f"reduce_scatter {dtype} n={n}")

            out = torch.empty(WORLD * n, dtype=dtype, device=DEV)
            ferrocomm.all_to_all_single(out, on_gpu(data(RANK, WORLD * n, dtype)))
            want = torch.cat([everyone(WORLD * n, dtype)[r][RANK * n : (RANK + 1) * n] for r in range(WORLD)])
            same(out, want, f"all_to_all {dtype} n={n}")

            x = on_gpu(data(RANK, n, dtype))
            ferrocomm.broadcast(x, WORLD - 1)
            same(x, data(WORLD - 1, n, dtype), f"broadcast {dtype} n={n}")
    ferrocomm.barrier()
    torch.cuda.synchronize()


@check("eager: symmetric tensors in place, max and min, out-of-place")
def _():
    for dtype in DTYPES:
        for n in SIZES:
            x = ferrocomm.empty(n, dtype)
            assert x.is_cuda and x.dtype == dtype and x.shape == (n,), x
            x.copy_(data(RANK, n, dtype))
            ferrocomm.all_reduce(x)
            same(x, torch.stack(everyone(n, torch.float32)).sum(0).to(dtype), f"symmetric all_reduce {dtype} n={n}")
            y = on_gpu(data(RANK, n, dtype))
            ferrocomm.all_reduce(y, "max")
            same(y, torch.stack(everyone(n, dtype)).max(0).values if n else y.cpu(), f"max {dtype} n={n}")
            src = on_gpu(data(RANK, n, dtype))
            out = torch.zeros_like(src)
            ferrocomm.all_reduce(src, "min", out=out)
            same(out, torch.stack(everyone(n, dtype)).min(0).values if n else out.cpu(), f"min {dtype} n={n}")
            same(src, data(RANK, n, dtype), "out-of-place input untouched")
    torch.cuda.synchronize()


@check("eager: a symmetric tensor is freed with its last view, after the kernels using it")
def _():
    for _ in range(20):
        x = ferrocomm.empty((1 << 20,), torch.bfloat16)
        x.fill_(1)
        ferrocomm.all_reduce(x)
        del x  # freed once the all-reduce queued on the stream has run
    torch.cuda.synchronize()
    S.check_errors()


@check("eager: ops on a side stream follow that stream")
def _():
    side = torch.cuda.Stream()
    x = on_gpu(data(RANK, 4099, torch.float32))
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        ferrocomm.all_reduce(x)
    torch.cuda.current_stream().wait_stream(side)
    same(x, torch.stack(everyone(4099, torch.float32)).sum(0), "side-stream all_reduce")


# --- torch.cuda.graph -----------------------------------------------------------------------------------------


@check(f"torch.cuda.graph: every collective captured, replayed {REPLAYS} times with new inputs")
def _():
    for dtype in (torch.bfloat16, torch.float32):
        for n in SIZES[1:]:
            ins = on_gpu(data(RANK, n, dtype))
            sym = ferrocomm.empty(n, dtype)
            gin = on_gpu(data(RANK, n, dtype))
            gout = torch.empty(WORLD * n, dtype=dtype, device=DEV)
            # Warm up on a side stream, as torch's docs ask before capturing.
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                ferrocomm.all_reduce(ins)
                ferrocomm.all_reduce(sym)
                ferrocomm.all_gather_into_tensor(gout, gin)
            torch.cuda.current_stream().wait_stream(s)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                ferrocomm.all_reduce(ins)
                ferrocomm.all_reduce(sym)
                ferrocomm.all_gather_into_tensor(gout, gin)
            for round in range(1, REPLAYS + 1):
                ins.copy_(data(RANK, n, dtype, round))
                sym.copy_(data(RANK, n, dtype, round + 1))
                gin.copy_(data(RANK, n, dtype, round + 2))
                graph.replay()
                if n <= 4099 or round % 20 == 0:
                    total = lambda k: torch.stack(everyone(n, torch.float32, k)).sum(0).to(dtype)  # noqa: E731
                    same(ins, total(round), f"graph all_reduce {dtype} n={n} replay {round}")
                    same(sym, total(round + 1), f"graph symmetric all_reduce {dtype} n={n} replay {round}")
                    same(gout, torch.cat(everyone(n, dtype, round + 2)), f"graph all_gather {dtype} n={n} replay {round}")
            torch.cuda.synchronize()
            S.check_errors()


# --- torch.compile --------------------------------------------------------------------------------------------


@check("torch.compile: the collectives inside a compiled function")
def _():
    def step(x, y):
        h = x * 2
        ferrocomm.all_reduce(h)
        g = torch.empty(WORLD * y.numel(), dtype=y.dtype, device=y.device)
        ferrocomm.all_gather_into_tensor(g, y + 1)
        return h + 1, g

    compiled = torch.compile(step, fullgraph=True)
    for n in (1, 33, 4099):
        x, y = on_gpu(data(RANK, n, torch.float32)), on_gpu(data(RANK, n, torch.bfloat16))
        h, g = compiled(x, y)
        same(h, torch.stack(everyone(n, torch.float32)).sum(0) * 2 + 1, f"compiled all_reduce n={n}")
        same(g, torch.cat([t + 1 for t in everyone(n, torch.bfloat16)]), f"compiled all_gather n={n}")


@check("torch.ops.ferrocomm: the registered ops with their fake implementations")
def _():
    from torch._subclasses.fake_tensor import FakeTensorMode

    x = on_gpu(data(RANK, 64, torch.float32))
    out = torch.ops.ferrocomm.all_reduce_out(x, "sum")
    same(out, torch.stack(everyone(64, torch.float32)).sum(0), "torch.ops.ferrocomm.all_reduce_out")
    with FakeTensorMode() as mode:
        fake = mode.from_tensor(x)
        assert torch.ops.ferrocomm.all_gather(fake).shape == (WORLD * 64,)
        assert torch.ops.ferrocomm.reduce_scatter(fake, "sum").shape == (64 // WORLD,)


# --- the tensor-parallel decode step -----------------------------------------------------------------------------


def tp_operands(rank, tokens, hidden, k_local, round=0):
    g = torch.Generator().manual_seed(rank * 7919 + tokens * 131 + round)
    # Multiples of 1/8 up to 2: exact in bfloat16, the products' sums exact in float32 in any order.
    q = lambda *shape: (torch.randint(-16, 17, shape, generator=g).float() / 8).to(torch.bfloat16)  # noqa: E731
    return q(tokens, k_local), q(k_local, hidden)


def tp_reference(tokens, hidden, k_local, residual, gamma, round=0):
    y = sum(
        (lambda x, w: x.float() @ w.float())(*tp_operands(r, tokens, hidden, k_local, round)) for r in range(WORLD)
    )
    z = y + residual.float()
    inv = torch.rsqrt((z * z).mean(dim=1, keepdim=True) + 1e-5)
    return z * inv * gamma.float()


def close(got, want, what):
    got = got.detach().float().cpu()
    if not torch.allclose(got, want, rtol=2**-7, atol=1e-6):
        worst = ((got - want).abs() / want.abs().clamp_min(1e-6)).max().item()
        raise AssertionError(f"{what}: relative error up to {worst:.3g}")


@check("tp_decode: every variant against a CPU reference, eager, in a graph replayed with new inputs, compiled")
def _():
    hidden, k_local = (1024, 512) if QUICK else (4096, 4096)
    for tokens in (1, 4, 16):
        x, w_host = tp_operands(RANK, tokens, hidden, k_local)
        w = ferrocomm.empty((k_local, hidden), torch.bfloat16)
        w.copy_(w_host)
        residual = on_gpu(tp_operands(99, tokens, hidden, hidden)[0][:, :hidden])
        gamma = on_gpu((torch.arange(hidden) % 5 + 1).to(torch.bfloat16) / 4)
        want = tp_reference(tokens, hidden, k_local, residual.cpu(), gamma.cpu())
        for variant in ("fused", "two_kernels", "three_kernels"):
            out = ferrocomm.tp_decode(on_gpu(x), w, residual, gamma, variant=variant)
            close(out, want, f"tp_decode {variant} tokens={tokens}")
        # A graph of the fused step, replayed with new activations.
        gx = on_gpu(x)
        gout = torch.empty(tokens, hidden, dtype=torch.bfloat16, device=DEV)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            ferrocomm.tp_decode(gx, w, residual, gamma, out=gout)
        for round in (1, 2, 3):
            gx.copy_(tp_operands(RANK, tokens, hidden, k_local, round)[0])
            # Every rank's weights stay those of round 0: the reference takes each round's x with them.
            graph.replay()
            y = sum(
                tp_operands(r, tokens, hidden, k_local, round)[0].float() @ tp_operands(r, tokens, hidden, k_local)[1].float()
                for r in range(WORLD)
            )
            z = y + residual.cpu().float()
            close(gout, z * torch.rsqrt((z * z).mean(1, keepdim=True) + 1e-5) * gamma.cpu().float(), f"graph replay {round}")
        compiled = torch.compile(lambda a: ferrocomm.tp_decode(a * 1, w, residual, gamma), fullgraph=True)
        close(compiled(on_gpu(x)), want, f"compiled tp_decode tokens={tokens}")
    torch.cuda.synchronize()
    S.check_errors()


# --- bad input ------------------------------------------------------------------------------------------------


@check("bad input raises at once with its own class and loses nothing")
def _():
    x = on_gpu(data(RANK, 16, torch.float32))
    before = x.clone()
    cases = [
        (lambda: ferrocomm.all_reduce(torch.ones(16)), ferrocomm.ForeignBufferError, "CPU"),
        (lambda: ferrocomm.all_reduce(torch.ones(16, 2, device=DEV).t()), ferrocomm.RequirementError, "contiguous"),
        (lambda: ferrocomm.all_reduce(torch.ones(16, dtype=torch.int32, device=DEV)), ferrocomm.RequirementError, "int32"),
        (lambda: ferrocomm.all_reduce(x, "mean"), ferrocomm.RequirementError, "not one of"),
        (
            lambda: ferrocomm.all_gather_into_tensor(torch.empty(3, device=DEV), x),
            ferrocomm.RequirementError,
            "needs",
        ),
        (
            lambda: ferrocomm.all_reduce(torch.ones(S.staging_bytes // 4 + 1, device=DEV)),
            ferrocomm.RequirementError,
            "ferrocomm.empty",
        ),
    ]
    for call, cls, words in cases:
        try:
            call()
        except cls as e:
            assert words in str(e), f"{cls.__name__} without {words!r}: {e}"
        else:
            raise AssertionError(f"no {cls.__name__} for a call that should raise it ({words})")
    same(x, before, "a refused call changed its input")
    ferrocomm.all_reduce(x)  # the session still works
    same(x, torch.stack(everyone(16, torch.float32)).sum(0), "all_reduce after refused calls")


# --- the user-kernel template ---------------------------------------------------------------------------------

try:
    import custom_kernel  # examples/python_kernels
except ImportError:
    custom_kernel = None
if custom_kernel is not None:
    # Its session replaces the default one: ferrocomm's collectives and the template's kernels on one team.
    S = custom_kernel.init()

    @check("user-kernel template: scaled_put eager, in a graph replayed 100 times, and under torch.compile")
    def _():
        n = 4099
        src = on_gpu(data(RANK, n, torch.float32))
        inbox = ferrocomm.empty(n, torch.float32)
        custom_kernel.scaled_put(src, inbox, 2.0)
        prev = (RANK - 1) % WORLD
        same(inbox, data(prev, n, torch.float32) * 2, "scaled_put eager")
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            custom_kernel.scaled_put(src, inbox, 3.0)
        for round in range(1, REPLAYS + 1):
            src.copy_(data(RANK, n, torch.float32, round))
            graph.replay()
            if round % 10 == 0:
                same(inbox, data(prev, n, torch.float32, round) * 3, f"scaled_put replay {round}")
        torch.cuda.synchronize()
        compiled = torch.compile(lambda s: custom_kernel.scaled_put(s * 1, inbox, 4.0), fullgraph=True)
        compiled(src)
        same(inbox, data(prev, n, torch.float32, REPLAYS) * 4, "scaled_put compiled")
        try:
            custom_kernel.scaled_put(src, torch.empty(n, device=DEV), 1.0)
        except ferrocomm.SymmetricRequiredError as e:
            assert e.argument == "inbox", e
        else:
            raise AssertionError("an ordinary inbox was accepted")


torch.cuda.synchronize()
S.synchronize()
dist.barrier()
print(f"[rank {RANK}] {'FAILED: ' + ', '.join(failures) if failures else 'all checks passed'}", flush=True)
ferrocomm.shutdown()
dist.destroy_process_group()
sys.exit(1 if failures else 0)
