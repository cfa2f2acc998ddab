"""One rank of a job started by ``ferrocomm launch --emulator`` (test_processes.py), shaped like a torchrun
job: one rank per process, one array per call. Ring steps and ferrocomm's all-reduce on one session."""

import os
import sys

import numpy as np

import custom_kernel
import ferrocomm

sys.path.insert(0, os.path.dirname(__file__))
from conftest import SCALE, rank_data  # noqa: E402


def main():
    s = custom_kernel.init(check_calls=True)  # the processes agree on every call, the kernels' too
    rank, world = s.rank, s.world
    assert (s.backend, s.spans_processes, len(s.local_ranks)) == ("emulator", True, 1), s
    prev = (rank + world - 1) % world
    for n in (0, 1, 7, 1000):
        inbox = ferrocomm.empty(n, "float32")
        acc = np.ones(n, np.float32)
        for step in range(3):
            custom_kernel.scaled_put(rank_data(rank, n, step), inbox, SCALE)
            np.testing.assert_array_equal(inbox, rank_data(prev, n, step) * np.float32(SCALE))
            custom_kernel.accumulate(acc, inbox)
        want = np.ones(n, np.float32)
        for step in range(3):
            want += rank_data(prev, n, step) * np.float32(SCALE)
        np.testing.assert_array_equal(acc, want)
        ferrocomm.all_reduce(acc)
        # Every rank's sum, as its own process computed it (the all-reduce adds them in rank order).
        sums = [np.ones(n, np.float32) for _ in range(world)]
        for r in range(world):
            for step in range(3):
                sums[r] += rank_data((r + world - 1) % world, n, step) * np.float32(SCALE)
        np.testing.assert_array_equal(acc, np.add.reduce(sums))
    ferrocomm.barrier()
    print(f"rank {rank}: ring steps and all-reduce verified", flush=True)


if __name__ == "__main__":
    main()
