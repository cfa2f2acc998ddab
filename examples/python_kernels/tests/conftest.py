"""custom_kernel's tests run the installed package on ferrocomm's CPU emulator with numpy: two ranks in one
process, one array per rank. torch is not needed."""

import numpy as np
import pytest

import custom_kernel
import ferrocomm

SCALE = 0.5


@pytest.fixture(scope="module")
def team():
    """A session of two emulated ranks in this process, made from custom_kernel's extension."""
    session = custom_kernel.init(backend="emulator", world=2)
    yield session
    ferrocomm.shutdown()


def rank_data(rank: int, n: int, step: int = 0) -> np.ndarray:
    """Rank `rank`'s input: small integers and halves, exact in float32 products and sums."""
    return ((np.arange(n) * 7 + rank * 13 + step * 5) % 23 - 11).astype(np.float32)


def ring_reference(srcs, scale):
    """Every rank's inbox after scaled_put: rank r holds `scale * srcs[r - 1]`, as float32 products."""
    world = len(srcs)
    return [srcs[(r + world - 1) % world] * np.float32(scale) for r in range(world)]


def still_works(team, n=9):
    """A ring step after an error: the session and its ring are intact."""
    src = [rank_data(r, n, step=3) for r in team.local_ranks]
    inbox = ferrocomm.empty(n, "float32")
    custom_kernel.scaled_put(src, inbox, SCALE)
    for got, want in zip(inbox, ring_reference(src, SCALE)):
        np.testing.assert_array_equal(got, want)
