"""Every collective at awkward sizes, on ordinary arrays and on symmetric memory, against numpy."""

import numpy as np
import pytest

import ferrocomm
from conftest import AWKWARD, rank_data

DTYPES = [np.float32, np.float16]
OPS = {"sum": np.add.reduce, "max": np.maximum.reduce, "min": np.minimum.reduce}


@pytest.mark.parametrize("n", AWKWARD)
@pytest.mark.parametrize("dtype", DTYPES)
def test_all_reduce_in_place_on_ordinary_arrays(team, n, dtype):
    x = [rank_data(r, n, dtype) for r in team.local_ranks]
    expected = np.add.reduce(x)
    team.all_reduce(x)
    for got in x:
        np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("op", sorted(OPS))
def test_all_reduce_ops(team, op):
    x = [rank_data(r, 257, np.float32) for r in team.local_ranks]
    expected = OPS[op](x)
    team.all_reduce(x, op)
    for got in x:
        np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("n", [1, 33, 4099])
def test_all_reduce_in_place_on_symmetric_memory(team, n):
    x = team.empty((n,), "float32")
    for r, part in zip(team.local_ranks, x):
        assert isinstance(part, np.ndarray) and part.shape == (n,)
        part[:] = rank_data(r, n, np.float32)
    expected = np.add.reduce([rank_data(r, n, np.float32) for r in team.local_ranks])
    team.all_reduce(x)
    for part in x:
        np.testing.assert_array_equal(part, expected)


def test_symmetric_memory_is_zeroed_and_shaped(team):
    x = team.zeros((3, 5), np.float16)
    for part in x:
        assert part.shape == (3, 5) and part.dtype == np.float16
        assert not part.any()


@pytest.mark.parametrize("n", [1, 7, 1000])
def test_all_reduce_out_of_place(team, n):
    x = [rank_data(r, n, np.float32) for r in team.local_ranks]
    before = [a.copy() for a in x]
    out = [np.zeros(n, np.float32) for _ in team.local_ranks]
    team.all_reduce(x, out=out)
    for got in out:
        np.testing.assert_array_equal(got, np.add.reduce(before))
    for a, b in zip(x, before):
        np.testing.assert_array_equal(a, b)  # the input is untouched


def test_all_reduce_out_of_place_into_symmetric_memory(team):
    x = [rank_data(r, 100, np.float32) for r in team.local_ranks]
    out = team.empty(100, "float32")
    team.all_reduce(x, out=out)
    for got in out:
        np.testing.assert_array_equal(got, np.add.reduce(x))


@pytest.mark.parametrize("n", AWKWARD)
@pytest.mark.parametrize("dtype", DTYPES)
def test_all_gather(team, n, dtype):
    world = team.world
    x = [rank_data(r, n, dtype) for r in team.local_ranks]
    out = [np.full(world * n, 99, dtype) for _ in team.local_ranks]
    team.all_gather_into_tensor(out, x)
    for got in out:
        np.testing.assert_array_equal(got, np.concatenate(x))


@pytest.mark.parametrize("n", AWKWARD)
@pytest.mark.parametrize("op", ["sum", "max"])
def test_reduce_scatter(team, n, op):
    world = team.world
    x = [rank_data(r, world * n, np.float32) for r in team.local_ranks]
    out = [np.full(n, 99, np.float32) for _ in team.local_ranks]
    team.reduce_scatter_tensor(out, x, op)
    reduced = OPS[op](x)
    for r, got in zip(team.local_ranks, out):
        np.testing.assert_array_equal(got, reduced[r * n : (r + 1) * n])


@pytest.mark.parametrize("n", AWKWARD)
def test_all_to_all(team, n):
    world = team.world
    x = [rank_data(r, world * n, np.float32) for r in team.local_ranks]
    out = [np.full(world * n, 99, np.float32) for _ in team.local_ranks]
    team.all_to_all_single(out, x)
    for q, got in zip(team.local_ranks, out):
        expected = np.concatenate([x[r][q * n : (q + 1) * n] for r in range(world)])
        np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("n", AWKWARD)
@pytest.mark.parametrize("root", [0, 1])
def test_broadcast(team, n, root):
    x = [rank_data(r, n, np.float16) for r in team.local_ranks]
    sent = x[root].copy()
    team.broadcast(x, root)
    for got in x:
        np.testing.assert_array_equal(got, sent)


def test_collectives_on_symmetric_memory_back_to_back(team):
    """Symmetric inputs and outputs (no staging copies), several calls in a row: epochs stay in step."""
    n, world = 64, team.world
    src = team.empty(n, "float32")
    dst = team.empty(world * n, "float32")
    for round in range(3):
        for r, part in zip(team.local_ranks, src):
            part[:] = rank_data(r, n, np.float32) + round
        team.all_gather_into_tensor(dst, src)
        for got in dst:
            np.testing.assert_array_equal(got, np.concatenate([p for p in src]))
        team.all_reduce(src)
        team.barrier()


def test_module_level_functions_use_the_default_session(team):
    x = [rank_data(r, 9, np.float32) for r in team.local_ranks]
    expected = np.add.reduce(x)
    assert ferrocomm.session() is team
    ferrocomm.all_reduce(x)
    ferrocomm.synchronize()
    for got in x:
        np.testing.assert_array_equal(got, expected)
