"""The Python layer's tests run on the CPU emulator with numpy: two ranks in one process here, two processes
under ``ferrocomm launch --emulator`` in test_processes.py. torch is not needed (the GPU machine runs the
torch checks: torch_check.py)."""

import numpy as np
import pytest

import ferrocomm


@pytest.fixture(scope="module")
def team():
    """A session of two emulated ranks in this process."""
    session = ferrocomm.init(backend="emulator", world=2)
    yield session
    ferrocomm.shutdown()


#: Sizes that catch edge cases: empty, one element, odd, unaligned tails, more than one block's share.
AWKWARD = [0, 1, 7, 33, 1000, 4099]


def rank_data(rank: int, n: int, dtype) -> np.ndarray:
    """Rank `rank`'s input: small integers (exact in float16 and in any summation order)."""
    return ((np.arange(n) * 7 + rank * 3) % 17 - 8).astype(dtype)
