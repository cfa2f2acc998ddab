"""The tensor-parallel decode step as one call, on the emulator: numpy has no bfloat16, so uint16 arrays carry
the bits; every variant, a few shapes, against a float32 reference rounded once."""

import numpy as np
import pytest

import ferrocomm

EPS = 1e-5


def to_bits(f: np.ndarray) -> np.ndarray:
    """bfloat16 bits of float32 values, rounded to nearest even."""
    u = np.ascontiguousarray(f, np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def from_bits(b: np.ndarray) -> np.ndarray:
    return (b.astype(np.uint32) << 16).view(np.float32)


def operands(world, tokens, hidden, k_local):
    rng = np.random.default_rng(tokens * 1000 + hidden)
    # Multiples of 1/8 up to 2: exact in bfloat16, and their products and sums exact in float32.
    q = lambda *shape: to_bits(rng.integers(-16, 17, shape).astype(np.float32) / 8)  # noqa: E731
    xs = [q(tokens, k_local) for _ in range(world)]
    ws = [q(k_local, hidden) for _ in range(world)]
    return xs, ws, q(tokens, hidden), q(hidden)


def reference(xs, ws, residual, gamma):
    y = sum(from_bits(x) @ from_bits(w) for x, w in zip(xs, ws)) + from_bits(residual)
    inv = 1.0 / np.sqrt((y * y).mean(axis=1, keepdims=True) + EPS)
    return y * inv * from_bits(gamma)


@pytest.mark.parametrize("variant", ["fused", "two_kernels", "three_kernels"])
@pytest.mark.parametrize("tokens,hidden,k_local", [(1, 72, 40), (4, 64, 33)])
def test_tp_decode_matches_the_reference(team, variant, tokens, hidden, k_local):
    world = team.world
    xs, ws, residual, gamma = operands(world, tokens, hidden, k_local)
    # The weights live in symmetric memory (read in place): 16-bit arrays, viewed as bfloat16 bits.
    w_parts = [p.view(np.uint16) for p in team.empty((k_local, hidden), "float16")]
    for part, wr in zip(w_parts, ws):
        part[:] = wr
    out = team.tp_decode(xs, w_parts, [residual] * world, [gamma] * world, variant=variant)
    want = reference(xs, ws, residual, gamma)
    for got in out:
        np.testing.assert_allclose(from_bits(got), want, rtol=2**-7, atol=1e-6)


def test_ordinary_weights_are_refused(team):
    world = team.world
    xs, ws, residual, gamma = operands(world, 1, 72, 40)
    with pytest.raises(ferrocomm.SymmetricRequiredError, match="weights") as e:
        team.tp_decode(xs, ws, [residual] * world, [gamma] * world)
    assert e.value.argument == "w"


def test_a_bad_shape_is_refused(team):
    world = team.world
    xs, ws, residual, gamma = operands(world, 1, 72, 40)
    with pytest.raises(ferrocomm.RequirementError, match="gamma"):
        team.tp_decode(xs, ws, [residual] * world, [gamma[:-1]] * world)
