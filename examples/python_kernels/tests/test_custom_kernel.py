"""The installed ``custom_kernel`` package on ferrocomm's CPU emulator: two ranks in one process, one numpy
array per rank, every result against numpy. torch is not needed."""

import numpy as np
import pytest

import custom_kernel
import ferrocomm
from conftest import SCALE, rank_data, ring_reference, still_works


def test_the_session_is_the_extensions(team):
    assert (team.backend, team.world, team.local_ranks) == ("emulator", 2, [0, 1])
    assert isinstance(ferrocomm.session()._inner, custom_kernel._native.Session)


@pytest.mark.parametrize("n", [0, 1, 7, 1000])
def test_scaled_put_from_ordinary_arrays(team, n):
    src = [rank_data(r, n) for r in team.local_ranks]
    inbox = ferrocomm.empty(n, "float32")
    assert custom_kernel.scaled_put(src, inbox, SCALE) is inbox
    for got, want in zip(inbox, ring_reference(src, SCALE)):
        np.testing.assert_array_equal(got, want)
    for r, a in zip(team.local_ranks, src):
        np.testing.assert_array_equal(a, rank_data(r, n))  # the input is untouched


def test_scaled_put_from_symmetric_memory(team):
    n = 100
    src = ferrocomm.empty(n, "float32")
    for r, part in zip(team.local_ranks, src):
        part[:] = rank_data(r, n)
    inbox = ferrocomm.empty(n, "float32")
    custom_kernel.scaled_put(src, inbox, -3.0)
    for got, want in zip(inbox, ring_reference([a.copy() for a in src], -3.0)):
        np.testing.assert_array_equal(got, want)


def test_scaled_put_into_a_longer_inbox_leaves_the_tail(team):
    inbox = ferrocomm.empty(10, "float32")
    for part in inbox:
        part[:] = 99.0
    src = [rank_data(r, 6) for r in team.local_ranks]
    custom_kernel.scaled_put(src, inbox)  # scale 1
    for got, want in zip(inbox, ring_reference(src, 1.0)):
        np.testing.assert_array_equal(got[:6], want)
        np.testing.assert_array_equal(got[6:], 99.0)


@pytest.mark.parametrize("n", [1, 7, 1000])
def test_accumulate_into_ordinary_arrays(team, n):
    inbox = ferrocomm.empty(n, "float32")
    for r, part in zip(team.local_ranks, inbox):
        part[:] = rank_data(r, n, step=1)
    acc = [rank_data(r, n, step=2) for r in team.local_ranks]
    assert custom_kernel.accumulate(acc, inbox) is acc
    for r, got in zip(team.local_ranks, acc):
        np.testing.assert_array_equal(got, rank_data(r, n, step=2) + rank_data(r, n, step=1))


def test_accumulate_into_symmetric_memory_and_a_shorter_acc(team):
    inbox = ferrocomm.empty(20, "float32")
    for r, part in zip(team.local_ranks, inbox):
        part[:] = rank_data(r, 20, step=1)
    acc = ferrocomm.empty(12, "float32")
    for r, part in zip(team.local_ranks, acc):
        part[:] = 1.0
    custom_kernel.accumulate(acc, inbox)
    for r, got in zip(team.local_ranks, acc):
        np.testing.assert_array_equal(got, 1.0 + rank_data(r, 20, step=1)[:12])


def test_back_to_back_ring_steps(team):
    """The pad's signals count launches: one ring serves step after step with no reset."""
    n, steps = 257, 6
    inbox = ferrocomm.empty(n, "float32")
    acc = [np.zeros(n, np.float32) for _ in team.local_ranks]
    want = [np.zeros(n, np.float32) for _ in team.local_ranks]
    for step in range(steps):
        src = [rank_data(r, n, step) for r in team.local_ranks]
        custom_kernel.scaled_put(src, inbox, SCALE)
        custom_kernel.accumulate(acc, inbox)
        want = [w + x for w, x in zip(want, ring_reference(src, SCALE))]
        for got, expected in zip(inbox, ring_reference(src, SCALE)):
            np.testing.assert_array_equal(got, expected)
    for got, expected in zip(acc, want):
        np.testing.assert_array_equal(got, expected)


def test_ferrocomms_collectives_share_the_session(team):
    n = 33
    inbox = ferrocomm.empty(n, "float32")
    src = [rank_data(r, n) for r in team.local_ranks]
    custom_kernel.scaled_put(src, inbox, SCALE)
    ferrocomm.all_reduce(inbox)  # in place on the kernel's output
    total = np.add.reduce(ring_reference(src, SCALE))
    for got in inbox:
        np.testing.assert_array_equal(got, total)
    x = [rank_data(r, n) for r in team.local_ranks]
    ferrocomm.all_reduce(x)
    custom_kernel.scaled_put(x, inbox, 2.0)  # and the kernels still run after them
    for got in inbox:
        np.testing.assert_array_equal(got, 2.0 * np.add.reduce(src))


def test_an_ordinary_inbox_is_refused(team):
    src = [rank_data(r, 8) for r in team.local_ranks]
    inbox = [np.full(8, 7.0, np.float32) for _ in team.local_ranks]
    with pytest.raises(ferrocomm.SymmetricRequiredError, match="inbox") as e:
        custom_kernel.scaled_put(src, inbox)
    assert e.value.argument == "inbox"
    for part in inbox:
        np.testing.assert_array_equal(part, 7.0)  # untouched
    with pytest.raises(ferrocomm.SymmetricRequiredError, match="inbox"):
        custom_kernel.accumulate([np.zeros(8, np.float32) for _ in team.local_ranks], inbox)
    still_works(team)


def test_a_view_into_symmetric_memory_is_not_symmetric(team):
    inbox = ferrocomm.empty(16, "float32")
    with pytest.raises(ferrocomm.SymmetricRequiredError, match="inbox"):
        custom_kernel.scaled_put([rank_data(r, 8) for r in team.local_ranks], [part[8:] for part in inbox])
    still_works(team)


def test_an_inbox_shorter_than_src_is_refused(team):
    src = [rank_data(r, 8) for r in team.local_ranks]
    inbox = ferrocomm.empty(7, "float32")
    with pytest.raises(ferrocomm.RequirementError, match=r"len\(inbox\) >= len\(src\)") as e:
        custom_kernel.scaled_put(src, inbox)
    assert e.value.argument == "inbox"
    for part in inbox:
        assert not part.any()  # nothing was stored
    still_works(team)


def test_an_acc_longer_than_the_inbox_is_refused(team):
    inbox = ferrocomm.empty(4, "float32")
    acc = [np.ones(5, np.float32) for _ in team.local_ranks]
    with pytest.raises(ferrocomm.RequirementError, match=r"len\(acc\) <= len\(inbox\)") as e:
        custom_kernel.accumulate(acc, inbox)
    assert e.value.argument == "acc"
    for part in acc:
        np.testing.assert_array_equal(part, 1.0)
    still_works(team)


@pytest.mark.parametrize("dtype", [np.float16, np.float64, np.int32])
def test_a_src_of_another_dtype_is_refused(team, dtype):
    src = [np.ones(8, dtype) for _ in team.local_ranks]
    inbox = ferrocomm.empty(8, "float32")
    with pytest.raises(ferrocomm.RequirementError) as e:
        custom_kernel.scaled_put(src, inbox)
    assert e.value.argument == "src"
    still_works(team)


def test_a_float16_inbox_is_refused(team):
    inbox = ferrocomm.empty(8, "float16")
    with pytest.raises(ferrocomm.RequirementError, match="float16") as e:
        custom_kernel.scaled_put([rank_data(r, 8) for r in team.local_ranks], inbox)
    assert e.value.argument == "inbox"
    still_works(team)


def test_one_array_for_two_local_ranks_is_refused(team):
    with pytest.raises(ferrocomm.RequirementError, match="one tensor per rank"):
        custom_kernel.scaled_put(rank_data(0, 8), ferrocomm.empty(8, "float32"))
    still_works(team)
