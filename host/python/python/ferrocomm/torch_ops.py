"""The collectives as torch custom ops (``torch.ops.ferrocomm.*``), with fake implementations, so that
``torch.compile`` traces through them and ``torch.cuda.graph`` records them like any other op.

Eager calls of the package's functions go straight to the extension (the op dispatcher's overhead is
measurable on a 3 µs collective); under ``torch.compile`` they dispatch to these ops.
"""

from __future__ import annotations

import torch

from . import session

_LIB = "ferrocomm"


@torch.library.custom_op(f"{_LIB}::all_reduce_", mutates_args=("tensor",))
def all_reduce_(tensor: torch.Tensor, op: str) -> None:
    """All-reduce in place."""
    session().all_reduce(tensor, op)


@all_reduce_.register_fake
def _(tensor, op):
    return None


@torch.library.custom_op(f"{_LIB}::all_reduce_out", mutates_args=())
def all_reduce_out(input: torch.Tensor, op: str) -> torch.Tensor:
    """All-reduce into a new tensor."""
    out = torch.empty_like(input)
    session().all_reduce(input, op, out=out)
    return out


@all_reduce_out.register_fake
def _(input, op):
    return torch.empty_like(input)


@torch.library.custom_op(f"{_LIB}::all_gather", mutates_args=())
def all_gather(input: torch.Tensor) -> torch.Tensor:
    """Every rank's ``input`` concatenated in rank order (flat)."""
    out = input.new_empty(session().world * input.numel())
    session().all_gather_into_tensor(out, input)
    return out


@all_gather.register_fake
def _(input):
    return input.new_empty(session().world * input.numel())


@torch.library.custom_op(f"{_LIB}::reduce_scatter", mutates_args=())
def reduce_scatter(input: torch.Tensor, op: str) -> torch.Tensor:
    """This rank's chunk of the reduction (flat)."""
    out = input.new_empty(input.numel() // session().world)
    session().reduce_scatter_tensor(out, input, op)
    return out


@reduce_scatter.register_fake
def _(input, op):
    return input.new_empty(input.numel() // session().world)


@torch.library.custom_op(f"{_LIB}::all_to_all", mutates_args=())
def all_to_all(input: torch.Tensor) -> torch.Tensor:
    """All-to-all with equal splits (flat)."""
    out = input.new_empty(input.numel())
    session().all_to_all_single(out, input)
    return out


@all_to_all.register_fake
def _(input):
    return input.new_empty(input.numel())


@torch.library.custom_op(f"{_LIB}::broadcast_", mutates_args=("tensor",))
def broadcast_(tensor: torch.Tensor, src: int) -> None:
    """Broadcast in place."""
    session().broadcast(tensor, src)


@broadcast_.register_fake
def _(tensor, src):
    return None


@torch.library.custom_op(f"{_LIB}::tp_decode", mutates_args=())
def tp_decode(x: torch.Tensor, w: torch.Tensor, residual: torch.Tensor, gamma: torch.Tensor, variant: str) -> torch.Tensor:
    """The tensor-parallel decode step (``ferrocomm.tp_decode``)."""
    return session().tp_decode(x, w, residual, gamma, variant=variant)


@tp_decode.register_fake
def _(x, w, residual, gamma, variant):
    return x.new_empty((x.shape[0], w.shape[-1]))


def ops():
    """``torch.ops.ferrocomm``."""
    return torch.ops.ferrocomm


def all_reduce(tensor: torch.Tensor, op: str, out: torch.Tensor | None):
    """The package's ``all_reduce`` as ops: in place, or into ``out``."""
    if out is None:
        ops().all_reduce_(tensor, op)
        return tensor
    return copy_into(out, ops().all_reduce_out(tensor, op))


def copy_into(out: torch.Tensor, result: torch.Tensor) -> torch.Tensor:
    """``out`` (the caller's output argument) filled with an op's result."""
    out.copy_(result.view(out.shape))
    return out
