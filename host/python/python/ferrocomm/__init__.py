"""ferrocomm: GPU-initiated communication kernels written in Rust, called from PyTorch.

The collectives run on torch's current stream, are recorded by ``torch.cuda.graph`` and traced by
``torch.compile`` (as the ``torch.ops.ferrocomm`` custom ops), and take any contiguous float32, float16 or
bfloat16 tensor. A tensor from :func:`empty` lives in ferrocomm's symmetric memory and is used in place;
any other tensor is copied through a symmetric staging buffer on the same stream.

Without a GPU the same package runs the kernels on ferrocomm's CPU emulator, on numpy arrays (or torch CPU
tensors): a session of several ranks in one process takes one array per rank.

    import torch, torch.distributed as dist, ferrocomm
    dist.init_process_group("gloo")            # or none: torchrun's variables are enough
    ferrocomm.init()
    x = ferrocomm.empty((4096,), dtype=torch.bfloat16)
    x.fill_(dist.get_rank() + 1)
    ferrocomm.all_reduce(x)                    # on torch's current stream
"""

from __future__ import annotations

import importlib.util
import math
import os
import sys
from typing import Any, Sequence

from . import _C
from .errors import *  # noqa: F401,F403  (the exception classes are part of the package's API)
from .errors import ConfigError, ForeignBufferError, RequirementError

__all__ = [
    "Session",
    "init",
    "session",
    "shutdown",
    "empty",
    "zeros",
    "all_reduce",
    "all_gather_into_tensor",
    "reduce_scatter_tensor",
    "all_to_all_single",
    "broadcast",
    "tp_decode",
    "barrier",
    "synchronize",
]

#: The element types of the collectives, as torch and numpy name them.
DTYPES = ("float32", "float16", "bfloat16")
_ELEMENT_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}
_DLPACK_CUDA, _DLPACK_CPU = 2, 1


def _dtype_name(dtype: Any) -> str:
    """``"float32"`` for ``torch.float32``, ``numpy.float32``, ``"float32"``..."""
    if isinstance(dtype, str) or type(dtype).__module__.startswith("torch"):
        name = str(dtype).removeprefix("torch.")
    else:
        try:
            import numpy

            name = numpy.dtype(dtype).name
        except (ImportError, TypeError):
            name = str(dtype)
    name = {"float": "float32", "half": "float16"}.get(name, name)
    if name not in DTYPES:
        raise RequirementError(f"argument `dtype`: {dtype} is not one of {', '.join(DTYPES)}", argument="dtype")
    return name


def _is_torch(x: Any) -> bool:
    return type(x).__module__.startswith("torch") and hasattr(x, "data_ptr")


class Session:
    """A team: every rank of this process (one, under torchrun), their communicator and symmetric memory.
    Module-level functions use the session :func:`init` made; a session can also be used directly."""

    def __init__(self, inner: "_C.Session"):
        self._inner = inner
        self.world: int = inner.world
        self.local_ranks: list[int] = inner.local_ranks
        self.backend: str = inner.backend
        #: Whether the team's ranks live in several processes (one each).
        self.spans_processes: bool = inner.spans_processes
        self._devices: list[tuple[int, int]] = inner.devices
        #: The GPU of this process's one rank, when it runs one rank on a GPU (the fast path of tensor_arg).
        self._cuda_ordinal: int | None = (
            self._devices[0][1] if len(self._devices) == 1 and self._devices[0][0] == _DLPACK_CUDA else None
        )

    @property
    def rank(self) -> int:
        """This process's rank (its first, when it runs several)."""
        return self.local_ranks[0]

    @property
    def staging_bytes(self) -> int:
        """The largest tensor that is not symmetric memory a call takes, in bytes."""
        return self._inner.staging_bytes

    # --- memory -------------------------------------------------------------------------------------------

    def empty(self, shape: int | Sequence[int], dtype: Any = "float32", *, library: str | None = None):
        """A tensor of symmetric memory (the same allocation on every rank, zeroed): collectives use it in
        place. Collective: every rank allocates the same shapes in the same order. Returns a torch tensor on
        GPUs (and on the emulator when ``library="torch"``), a numpy array on the emulator; a list of them,
        one per local rank, when this process runs several ranks. The memory is freed with the last tensor
        viewing it, after the kernels still using it."""
        shape = (shape,) if isinstance(shape, int) else tuple(int(d) for d in shape)
        if any(d < 0 for d in shape):
            raise RequirementError(f"argument `shape`: {shape} has a negative dimension", argument="shape")
        name = _dtype_name(dtype)
        nbytes = math.prod(shape) * _ELEMENT_BYTES[name]
        exports = self._inner.alloc(nbytes, list(shape), name)
        library = library or ("torch" if self.backend == "cuda" or name == "bfloat16" else "numpy")
        if library == "torch":
            import torch

            made = [torch.from_dlpack(e) for e in exports]
        elif library == "numpy":
            import numpy

            made = [numpy.from_dlpack(e) for e in exports]
        else:
            raise RequirementError(f"argument `library`: {library!r} is not \"torch\" or \"numpy\"", argument="library")
        return made[0] if len(made) == 1 else made

    zeros = empty  # symmetric memory is zeroed when allocated

    # --- tensors → what the extension takes ----------------------------------------------------------------

    def _per_rank(self, x: Any, argument: str) -> list:
        if isinstance(x, (list, tuple)):
            if len(x) != len(self.local_ranks):
                raise RequirementError(
                    f"argument `{argument}`: {len(x)} tensors for {len(self.local_ranks)} local rank(s); pass one per rank",
                    argument=argument,
                )
            return list(x)
        if len(self.local_ranks) != 1:
            raise RequirementError(
                f"argument `{argument}`: this process runs ranks {self.local_ranks}; pass a list of one tensor per rank",
                argument=argument,
            )
        return [x]

    def tensor_arg(self, x: Any, argument: str, dtype: str | None = None):
        """``((addresses, numel), dtype, streams)`` of a tensor argument (one tensor per local rank, a torch
        tensor, a numpy array or any DLPack producer), after checking what the extension cannot:
        contiguity, dtype (``dtype``: the one the call's other tensors have), device, equal sizes. What an
        extension of one's own kernels passes to its functions (``examples/python_kernels``)."""
        # The common case first, in as few Python operations as it takes (a collective of a few µs is called
        # this way): one rank in this process, a contiguous CUDA tensor of a collective's dtype on its GPU.
        if self._cuda_ordinal is not None and isinstance(x, _TorchTensor):
            name = _TORCH_DTYPE_NAMES.get(x.dtype)
            if (
                name is not None
                and (dtype is None or dtype == name)
                and x.is_cuda
                and x.get_device() == self._cuda_ordinal
                and x.is_contiguous()
            ):
                return ([x.data_ptr()], x.numel()), name, [_current_raw_stream(self._cuda_ordinal)]
        return self._tensor_arg_checked(x, argument, dtype)

    def _tensor_arg_checked(self, x: Any, argument: str, dtype: str | None):
        """The checks of :meth:`tensor_arg` that the fast case skips, with their error messages."""
        parts = self._per_rank(x, argument)
        addrs, numels, dtypes, streams = [], [], [], []
        for slot, t in enumerate(parts):
            kind, ordinal = self._devices[slot]
            if _is_torch(t):
                if not t.is_contiguous():
                    raise RequirementError(
                        f"argument `{argument}` is not contiguous; pass `.contiguous()`", argument=argument
                    )
                name = str(t.dtype).removeprefix("torch.")
                if t.device.type == "cuda":
                    on = (_DLPACK_CUDA, t.device.index)
                    streams.append(_current_raw_stream(t.device.index))
                else:
                    on = (_DLPACK_CPU, 0)
                addr, numel = t.data_ptr(), t.numel()
            else:
                addr, numel, name, cuda = _C.describe(t, argument)
                on = (_DLPACK_CUDA, cuda) if cuda is not None else (_DLPACK_CPU, 0)
            if name == "uint16" and dtype == "bfloat16" and not _is_torch(t):
                # numpy has no bfloat16: where a call takes bfloat16 only, a uint16 array passes its bits.
                name = "bfloat16"
            if name not in DTYPES:
                raise RequirementError(
                    f"argument `{argument}` is {name}; the collectives take {', '.join(DTYPES)}", argument=argument
                )
            if on != (kind, ordinal):
                where = f"GPU {ordinal}" if kind == _DLPACK_CUDA else "the CPU (the emulator)"
                there = f"GPU {on[1]}" if on[0] == _DLPACK_CUDA else "the CPU"
                raise ForeignBufferError(
                    f"argument `{argument}` is on {there}, but rank {self.local_ranks[slot]} runs on {where}",
                    rank=self.local_ranks[slot],
                    argument=argument,
                )
            addrs.append(addr)
            numels.append(numel)
            dtypes.append(name)
        if len(set(numels)) != 1 or len(set(dtypes)) != 1:
            raise RequirementError(
                f"argument `{argument}`: the local ranks' tensors differ ({numels} elements, {dtypes})",
                argument=argument,
            )
        if dtype is not None and dtypes[0] != dtype:
            raise RequirementError(
                f"argument `{argument}` is {dtypes[0]} but the call's other tensors are {dtype}", argument=argument
            )
        return (addrs, numels[0]), dtypes[0], (streams or None)

    # --- collectives ---------------------------------------------------------------------------------------

    def all_reduce(self, tensor, op: str = "sum", *, out=None):
        """All-reduce with ``op`` (``"sum"``, ``"max"``, ``"min"``): in place, or into ``out``. Returns the result."""
        arg, dtype, streams = self.tensor_arg(tensor, "tensor")
        result = arg if out is None else self.tensor_arg(out, "out", dtype)[0]
        self._inner.all_reduce(arg, result, dtype, op, streams)
        return tensor if out is None else out

    def all_gather_into_tensor(self, output, input):
        """Every rank's ``input`` (n elements) lands at ``rank * n`` of every rank's ``output`` (world × n)."""
        src, dtype, streams = self.tensor_arg(input, "input")
        dst = self.tensor_arg(output, "output", dtype)[0]
        self._inner.all_gather(src, dst, dtype, streams)
        return output

    def reduce_scatter_tensor(self, output, input, op: str = "sum"):
        """Rank r's ``output`` (n elements) receives chunk r of the reduction of every rank's ``input`` (world × n)."""
        src, dtype, streams = self.tensor_arg(input, "input")
        dst = self.tensor_arg(output, "output", dtype)[0]
        self._inner.reduce_scatter(src, dst, dtype, op, streams)
        return output

    def all_to_all_single(self, output, input):
        """Chunk q of rank r's ``input`` (world equal chunks) lands in chunk r of rank q's ``output``."""
        src, dtype, streams = self.tensor_arg(input, "input")
        dst = self.tensor_arg(output, "output", dtype)[0]
        self._inner.all_to_all(src, dst, dtype, streams)
        return output

    def broadcast(self, tensor, src: int = 0):
        """Rank ``src``'s ``tensor`` lands in every rank's."""
        arg, dtype, streams = self.tensor_arg(tensor, "tensor")
        self._inner.broadcast(arg, dtype, src, streams)
        return tensor

    def tp_decode(self, x, w, residual, gamma, *, variant: str = "fused", out=None):
        """The tensor-parallel decode step of a row-parallel linear layer and its norm, in bfloat16:
        ``out = rmsnorm(Σ_ranks x @ w + residual) * gamma``, the same on every rank. ``x``: this rank's
        ``(tokens, k / world)`` shard of the activations; ``w``: its ``(k / world, hidden)`` rows of the weights,
        which must be symmetric memory (:func:`empty`: they are read in place); ``residual``: ``(tokens,
        hidden)``; ``gamma``: ``(hidden,)``. ``variant``: ``"fused"`` (one kernel: each finished tile goes to
        its owner at once), ``"two_kernels"`` or ``"three_kernels"``. Returns ``out`` (made when not given).
        The first call of a shape allocates the step's buffers (collectively), so it must come before a
        ``torch.cuda.graph`` capture. On numpy, which has no bfloat16, uint16 arrays carry the bits."""
        parts = self._per_rank(x, "x")
        first = parts[0]
        tokens = first.shape[0] if len(first.shape) == 2 else 0
        hidden = self._per_rank(w, "w")[0].shape[-1]
        if out is None:
            outs = [self._like(p, (tokens, hidden)) for p in parts]
            out = outs[0] if len(outs) == 1 else outs
        args = [self.tensor_arg(t, name, "bfloat16") for t, name in ((x, "x"), (w, "w"), (residual, "residual"), (gamma, "gamma"), (out, "out"))]
        capturing = _is_torch(first) and first.is_cuda and _torch_capturing()
        self._inner.tp_decode(*(a[0] for a in args), tokens, hidden, variant, capturing, args[0][2])
        return out

    @staticmethod
    def _like(t, shape):
        """A new tensor of ``shape`` for the result of a call on ``t``: of t's library, device and dtype."""
        if _is_torch(t):
            return t.new_empty(shape)
        import numpy

        return numpy.zeros(shape, t.dtype)

    def barrier(self, device: Any = None):
        """A barrier across every rank, on torch's current stream of ``device`` (on GPUs), else waited for."""
        streams = None
        if self.backend == "cuda":
            import torch

            index = torch.cuda.current_device() if device is None else torch.device(device).index
            streams = [_current_raw_stream(index) for _ in self.local_ranks]
        self._inner.barrier(streams)

    def synchronize(self):
        """Waits for every launch of the session and raises the device errors of any that failed."""
        self._inner.synchronize()

    def check_errors(self):
        """Raises the device errors of launches that have finished, without waiting when there are none."""
        self._inner.check_errors()

    def close(self):
        """Waits for the session's work and frees its team (tensors still alive keep their memory)."""
        self._inner.close()

    def __repr__(self) -> str:
        return f"ferrocomm.Session(backend={self.backend!r}, world={self.world}, local_ranks={self.local_ranks})"


_session: Session | None = None


def _job_env() -> dict[str, str] | None:
    """The launcher's variables, with torch.distributed's rank and world when its default group exists (so a
    job started any way torch accepts forms the same team). ``None``: no launcher, a single-process team."""
    env = dict(os.environ)
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        env["RANK"] = str(dist.get_rank())
        env["WORLD_SIZE"] = str(dist.get_world_size())
        env.setdefault("LOCAL_RANK", env["RANK"])
        env.setdefault("LOCAL_WORLD_SIZE", env["WORLD_SIZE"])
    launched = any(k in env for k in ("RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID", "FERROCOMM_RANK"))
    return env if launched else None


def init(
    *,
    backend: str | None = None,
    world: int | None = None,
    staging_bytes: int | None = None,
    check_calls: bool | None = None,
    extension: Any = None,
) -> Session:
    """Forms this process's team and makes it the default session.

    Under a launcher (torchrun, mpirun, srun, ``ferrocomm launch``) or after ``torch.distributed`` made its
    default group, the process is one rank of the job; the rendezvous uses ``MASTER_PORT + 1`` (never torch's
    own store port) unless ``FERROCOMM_RENDEZVOUS=host:port`` says otherwise. Processes that share a GPU
    (more local ranks than GPUs) get ``FERROCOMM_RANKS_PER_GPU`` set for them; start an MPS daemon so they
    run side by side. Otherwise the team is every GPU of the process, or ``world`` ranks of the CPU emulator
    (``backend="emulator"``, or when there is no GPU).

    ``staging_bytes``: the largest tensor that is not symmetric memory a call takes (default 64 MiB on GPUs,
    4 MiB on the emulator).

    ``check_calls``: before every call, the processes check over the rendezvous that they make the same call
    with the same sizes, and raise :class:`DisagreementError` on every rank when they do not (a host round
    trip per call; default ``FERROCOMM_CHECK_CALLS=1``, else off). Without it, ranks that disagree wait on
    each other until the device timeout (:class:`DeviceTimeoutError`).

    ``extension``: an extension module of one's own kernels built with ferrocomm's session classes
    (``examples/python_kernels``); its session runs the collectives and its kernels on one team."""
    global _session
    env = _job_env()
    if env is not None and "FERROCOMM_RANKS_PER_GPU" not in os.environ:
        gpus = _visible_gpus()
        local_world = int(env.get("LOCAL_WORLD_SIZE", env.get("OMPI_COMM_WORLD_LOCAL_SIZE", "1")))
        if gpus and local_world > gpus:
            os.environ["FERROCOMM_RANKS_PER_GPU"] = str(-(-local_world // gpus))
    if _session is not None:
        _session.close()
    module = _C if extension is None else extension
    if check_calls is None:
        check_calls = os.environ.get("FERROCOMM_CHECK_CALLS", "") == "1"
    _session = Session(
        module.Session(env=env, backend=backend, world=world, staging_bytes=staging_bytes, check_calls=check_calls)
    )
    return _session


def _visible_gpus() -> int:
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        return torch.cuda.device_count()
    return 0


def session() -> Session:
    """The default session (:func:`init` makes it)."""
    if _session is None:
        raise ConfigError("ferrocomm.init() has not been called in this process")
    return _session


def shutdown() -> None:
    """Closes the default session."""
    global _session
    if _session is not None:
        _session.close()
        _session = None


def empty(shape, dtype: Any = "float32", *, library: str | None = None):
    """:meth:`Session.empty` of the default session."""
    return session().empty(shape, dtype, library=library)


def zeros(shape, dtype: Any = "float32", *, library: str | None = None):
    """:meth:`Session.empty`: symmetric memory is zeroed when allocated."""
    return session().empty(shape, dtype, library=library)


def _compiling() -> bool:
    return _is_compiling is not None and _is_compiling()


def all_reduce(tensor, op: str = "sum", *, out=None):
    """All-reduce ``tensor`` in place (or into ``out``) with ``op``; on torch's current stream."""
    if _compiling():
        from . import torch_ops

        return torch_ops.all_reduce(tensor, op, out)
    return session().all_reduce(tensor, op, out=out)


def all_gather_into_tensor(output, input):
    """Every rank's ``input`` lands at ``rank * input.numel()`` of ``output``."""
    if _compiling():
        from . import torch_ops

        return torch_ops.copy_into(output, torch_ops.ops().all_gather(input))
    return session().all_gather_into_tensor(output, input)


def reduce_scatter_tensor(output, input, op: str = "sum"):
    """Rank r's ``output`` receives chunk r of the reduction of every rank's ``input``."""
    if _compiling():
        from . import torch_ops

        return torch_ops.copy_into(output, torch_ops.ops().reduce_scatter(input, op))
    return session().reduce_scatter_tensor(output, input, op)


def all_to_all_single(output, input):
    """Chunk q of rank r's ``input`` lands in chunk r of rank q's ``output``."""
    if _compiling():
        from . import torch_ops

        return torch_ops.copy_into(output, torch_ops.ops().all_to_all(input))
    return session().all_to_all_single(output, input)


def broadcast(tensor, src: int = 0):
    """Rank ``src``'s ``tensor`` lands in every rank's."""
    if _compiling():
        from . import torch_ops

        torch_ops.ops().broadcast_(tensor, src)
        return tensor
    return session().broadcast(tensor, src)


def tp_decode(x, w, residual, gamma, *, variant: str = "fused", out=None):
    """:meth:`Session.tp_decode` of the default session: the tensor-parallel decode step as one op."""
    if _compiling():
        from . import torch_ops

        result = torch_ops.ops().tp_decode(x, w, residual, gamma, variant)
        return result if out is None else torch_ops.copy_into(out, result)
    return session().tp_decode(x, w, residual, gamma, variant=variant, out=out)


def barrier(device: Any = None):
    """A barrier across every rank, in torch's stream order on GPUs."""
    session().barrier(device)


def synchronize():
    """Waits for the default session's work and raises the device errors of any that failed."""
    session().synchronize()


# What the torch path needs, looked up once: the tensor type, the collectives' dtypes, torch's current stream
# as a raw handle (``torch.cuda.current_stream().cuda_stream`` makes a Python object each call, µs on a
# collective of a few), and whether torch.compile is tracing.
_TorchTensor: Any = ()  # matches nothing when torch is not installed
_TORCH_DTYPE_NAMES: dict = {}
_is_compiling = None


def _torch_capturing() -> bool:
    return _torch_module is not None and _torch_module.cuda.is_current_stream_capturing()


_torch_module: Any = None


def _current_raw_stream(index: int) -> int:
    import torch

    return torch.cuda.current_stream(index).cuda_stream


if importlib.util.find_spec("torch") is not None:
    import torch as _torch

    _torch_module = _torch
    _TorchTensor = _torch.Tensor
    _TORCH_DTYPE_NAMES = {_torch.float32: "float32", _torch.float16: "float16", _torch.bfloat16: "bfloat16"}
    _is_compiling = _torch.compiler.is_compiling
    _current_raw_stream = getattr(_torch._C, "_cuda_getCurrentRawStream", _current_raw_stream)  # noqa: F811
    # The ops are registered at import, so torch.compile and torch.ops.ferrocomm see them; without torch the
    # package works on numpy arrays alone.
    from . import torch_ops as _torch_ops  # noqa: F401
