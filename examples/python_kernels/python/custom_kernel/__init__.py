"""custom_kernel: one's own ferrocomm kernels (a scaled ring put with signals) for PyTorch and numpy.

The template for shipping a kernels crate with ``pip install``: the extension ``custom_kernel._native`` carries
ferrocomm's session classes beside its kernels, so after :func:`init` ferrocomm's collectives and these
kernels run on one team, on torch's current stream (and in ``torch.cuda.graph`` captures), or on the CPU
emulator with numpy arrays.

    import torch, ferrocomm, custom_kernel
    custom_kernel.init()                             # instead of ferrocomm.init()
    inbox = ferrocomm.empty((n,), dtype=torch.float32)
    acc = torch.zeros(n, device="cuda")
    custom_kernel.scaled_put(x, inbox, scale=0.5)   # inbox <- 0.5 * x of the previous rank
    custom_kernel.accumulate(acc, inbox)            # acc += inbox
    ferrocomm.all_reduce(acc)                        # the same team

Every tensor is float32 (the kernels are). ``inbox`` is symmetric memory (``ferrocomm.empty``), the same
allocation on every rank: peers store into it. ``src`` and ``acc`` may be any tensor; ordinary ones are
copied through ferrocomm's staging buffers in stream order.
"""

from __future__ import annotations

import importlib.util
import sys
import weakref
from typing import Any

import ferrocomm
from ferrocomm import ConfigError, RequirementError

from . import _native

__all__ = ["init", "scaled_put", "accumulate"]

#: The element type of every tensor the kernels take.
DTYPE = "float32"

#: One ring (its signal pad) per session, dropped with the session.
_rings: "weakref.WeakKeyDictionary[ferrocomm.Session, _native.Ring]" = weakref.WeakKeyDictionary()


def init(**kw: Any) -> ferrocomm.Session:
    """:func:`ferrocomm.init` with this package's extension: the default session runs ferrocomm's collectives
    and these kernels on one team. Takes ferrocomm.init's arguments (``backend``, ``world``, ``staging_bytes``)."""
    return ferrocomm.init(extension=_native, **kw)


def _session() -> ferrocomm.Session:
    s = ferrocomm.session()
    if not isinstance(s._inner, _native.Session):
        # Another extension's Session (ferrocomm.init() without extension=) is a different Rust type.
        raise ConfigError(
            "the default session was made by ferrocomm.init(); call custom_kernel.init() "
            "(ferrocomm.init(extension=custom_kernel._native)) so that it runs these kernels"
        )
    return s


def _ring(s: ferrocomm.Session) -> "_native.Ring":
    ring = _rings.get(s)
    if ring is None:
        # Collective (symmetric memory): every rank reaches its first scaled_put at the same point.
        ring = _rings[s] = _native.Ring(s._inner)
    return ring


def _f32(s: ferrocomm.Session, x: Any, argument: str):
    """``(arg, streams)`` of a float32 tensor argument, after ferrocomm's checks (contiguity, device, sizes)."""
    arg, dtype, streams = s.tensor_arg(x, argument)
    if dtype != DTYPE:
        raise RequirementError(
            f"argument `{argument}` is {dtype}; custom_kernel's kernels take {DTYPE}", argument=argument
        )
    return arg, streams


def _compiling() -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and torch.compiler.is_compiling()


def scaled_put(src, inbox, scale: float = 1.0):
    """Every rank stores ``scale * src`` into the next rank's ``inbox`` (rank r's inbox receives rank r-1's,
    in a ring). ``inbox``: symmetric memory (``ferrocomm.empty``) at least as long as ``src``. Returns ``inbox``."""
    if _compiling():
        from . import torch_ops

        torch_ops.ops().scaled_put(src, inbox, float(scale))
        return inbox
    _scaled_put(src, inbox, scale)
    return inbox


def _scaled_put(src, inbox, scale: float) -> None:
    s = _session()
    src_arg, streams = _f32(s, src, "src")
    inbox_arg, _ = _f32(s, inbox, "inbox")
    _native.scaled_put(s._inner, _ring(s), src_arg, inbox_arg, float(scale), streams)


def accumulate(acc, inbox):
    """``acc += inbox`` on every rank (``acc`` no longer than ``inbox``, a symmetric tensor). Returns ``acc``."""
    if _compiling():
        from . import torch_ops

        torch_ops.ops().accumulate(acc, inbox)
        return acc
    _accumulate(acc, inbox)
    return acc


def _accumulate(acc, inbox) -> None:
    s = _session()
    acc_arg, streams = _f32(s, acc, "acc")
    inbox_arg, _ = _f32(s, inbox, "inbox")
    _native.accumulate(s._inner, acc_arg, inbox_arg, streams)


if importlib.util.find_spec("torch") is not None:
    # Registered at import where torch is installed, so torch.compile and torch.ops.custom_kernel see them;
    # without torch the package works on numpy arrays alone.
    from . import torch_ops as _torch_ops  # noqa: F401
