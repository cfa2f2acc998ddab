"""Host cost of one call, by layer, in one process (a team of one rank on GPU 0): torch's current stream two
ways, the Python layer's tensor check, the extension's call alone, the package's call (in place on symmetric
memory, and on an ordinary tensor, staged), the same through the torch op dispatcher, and a torch op for
scale. Each figure is µs per call over 2000 calls back to back on the stream. ``python3 overhead.py``"""

import time, torch, ferrocomm
s = ferrocomm.init(world=1)
x = ferrocomm.empty(4096, torch.bfloat16)
o = torch.ones(4096, dtype=torch.bfloat16, device="cuda")
arg, dt, streams = s.tensor_arg(x, "t")


def per(f, n=2000):
    for _ in range(50): f()
    torch.cuda.synchronize(); t = time.perf_counter()
    for _ in range(n): f()
    torch.cuda.synchronize(); return (time.perf_counter() - t) / n * 1e6
rows = {
 "current_stream": lambda: torch.cuda.current_stream(x.device).cuda_stream,
 "raw stream": lambda: torch._C._cuda_getCurrentRawStream(0),
 "tensor_arg": lambda: s.tensor_arg(x, "t"),
 "_inner.barrier": lambda: s._inner.barrier(streams),
 "_inner.all_reduce sym": lambda: s._inner.all_reduce(arg, arg, dt, "sum", streams),
 "ferrocomm.all_reduce sym": lambda: ferrocomm.all_reduce(x),
 "ferrocomm.all_reduce ordinary": lambda: ferrocomm.all_reduce(o),
 "torch.ops all_reduce_": lambda: torch.ops.ferrocomm.all_reduce_(x, "sum"),
 "x.add_(1) (torch op)": lambda: x.add_(1),
}
for k, f in rows.items(): print(f"{k:32s} {per(f):8.2f} us/call")
