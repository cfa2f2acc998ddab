"""One rank of a job started by ``ferrocomm launch --emulator`` (test_processes.py): every collective on
one array per process, against numpy, then a peer that skips a call must come back as a typed timeout."""

import os
import sys

import numpy as np

import ferrocomm

sys.path.insert(0, os.path.dirname(__file__))
from conftest import AWKWARD, rank_data  # noqa: E402


def main():
    s = ferrocomm.init()
    rank, world = s.rank, s.world
    assert (s.backend, s.spans_processes, len(s.local_ranks)) == ("emulator", True, 1), s
    if os.environ.get("RANK_WORKER_FAULT") == "skip":
        return skip_a_call(s)
    if os.environ.get("RANK_WORKER_FAULT") == "disagree":
        return disagree_on_sizes(s)
    everyone = lambda n, dtype=np.float32: [rank_data(r, n, dtype) for r in range(world)]  # noqa: E731

    for n in AWKWARD:
        x = rank_data(rank, n, np.float32)
        s.all_reduce(x)
        np.testing.assert_array_equal(x, np.add.reduce(everyone(n)))

        out = np.zeros(world * n, np.float16)
        s.all_gather_into_tensor(out, rank_data(rank, n, np.float16))
        np.testing.assert_array_equal(out, np.concatenate(everyone(n, np.float16)))

        out = np.zeros(n, np.float32)
        s.reduce_scatter_tensor(out, rank_data(rank, world * n, np.float32), "max")
        np.testing.assert_array_equal(out, np.maximum.reduce(everyone(world * n))[rank * n : (rank + 1) * n])

        out = np.zeros(world * n, np.float32)
        s.all_to_all_single(out, rank_data(rank, world * n, np.float32))
        np.testing.assert_array_equal(
            out, np.concatenate([everyone(world * n)[r][rank * n : (rank + 1) * n] for r in range(world)])
        )

        x = rank_data(rank, n, np.float32)
        s.broadcast(x, world - 1)
        np.testing.assert_array_equal(x, rank_data(world - 1, n, np.float32))

    sym = s.empty(100, "float32")
    sym[:] = rank_data(rank, 100, np.float32)
    s.all_reduce(sym)
    np.testing.assert_array_equal(sym, np.add.reduce(everyone(100)))
    s.barrier()
    print(f"rank {rank}: every collective verified", flush=True)


def skip_a_call(s):
    """Rank 1 leaves without joining the all-reduce: rank 0's wait must end in a typed error naming it."""
    if s.rank == 1:
        print("rank 1: leaving without the all-reduce", flush=True)
        return
    try:
        s.all_reduce(np.ones(16, np.float32))
    except (ferrocomm.PeersExitedError, ferrocomm.DeviceTimeoutError) as e:
        print(f"rank 0: {type(e).__name__} (rank {e.rank}): {e}", flush=True)
    else:
        raise AssertionError("the all-reduce without rank 1 returned")


def disagree_on_sizes(s):
    """The ranks all-reduce different sizes: with the calls checked, every rank gets a DisagreementError
    listing each rank's call, at once, and the session keeps working."""
    assert s._inner.check_calls
    try:
        s.all_reduce(np.ones(16 + s.rank, np.float32))
    except ferrocomm.DisagreementError as e:
        print(f"rank {s.rank}: DisagreementError: {e}", flush=True)
    else:
        raise AssertionError("ranks that disagree were not told")
    x = np.ones(8, np.float32)
    s.all_reduce(x)
    np.testing.assert_array_equal(x, np.full(8, s.world, np.float32))


if __name__ == "__main__":
    main()
