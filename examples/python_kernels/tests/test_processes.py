"""Two processes under ``ferrocomm launch --emulator``, one rank each: the package in a job shaped like
torchrun's, the processes checking every call against each other. Needs the ``ferrocomm`` command:
``FERROCOMM_CLI``, else the one on PATH, else the workspace's build (``cargo build -p ferrocomm-cli``)."""

import os
import pathlib
import shutil
import subprocess
import sys

import pytest

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[2]


def cli():
    candidates = [os.environ.get("FERROCOMM_CLI"), shutil.which("ferrocomm")]
    candidates += [str(ROOT / "target" / p / "ferrocomm") for p in ("debug", "release")]
    for c in candidates:
        if c and os.access(c, os.X_OK):
            return c
    if os.environ.get("FERROCOMM_CLI"):
        pytest.fail(f"FERROCOMM_CLI={os.environ['FERROCOMM_CLI']} is not an executable")
    pytest.skip("no `ferrocomm` command: build it with `cargo build -p ferrocomm-cli` or set FERROCOMM_CLI")


def test_two_processes_run_ring_steps_and_collectives():
    done = subprocess.run(
        [cli(), "launch", "--emulator", "-n", "2", "--", sys.executable, str(HERE / "rank_worker.py")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    for rank in range(2):
        assert f"[rank {rank}] rank {rank}: ring steps and all-reduce verified" in done.stdout, done.stdout
