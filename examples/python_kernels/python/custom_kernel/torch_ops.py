"""The kernels as torch custom ops (``torch.ops.custom_kernel.*``), with fake implementations, so that
``torch.compile`` traces through them and ``torch.cuda.graph`` records them like any other op.

Eager calls of the package's functions go straight to the extension (the op dispatcher's overhead is
measurable on a few-microsecond kernel); under ``torch.compile`` they dispatch to these ops. Both mutate
an argument in place and return nothing, so their fakes have nothing to make.
"""

from __future__ import annotations

import torch

from . import _accumulate, _scaled_put

_LIB = "custom_kernel"


@torch.library.custom_op(f"{_LIB}::scaled_put", mutates_args=("inbox",))
def scaled_put(src: torch.Tensor, inbox: torch.Tensor, scale: float) -> None:
    """The next rank's ``inbox`` receives ``scale * src``; this rank's receives the previous rank's."""
    _scaled_put(src, inbox, scale)


@scaled_put.register_fake
def _(src, inbox, scale):
    return None


@torch.library.custom_op(f"{_LIB}::accumulate", mutates_args=("acc",))
def accumulate(acc: torch.Tensor, inbox: torch.Tensor) -> None:
    """``acc += inbox``."""
    _accumulate(acc, inbox)


@accumulate.register_fake
def _(acc, inbox):
    return None


def ops():
    """``torch.ops.custom_kernel``."""
    return torch.ops.custom_kernel
