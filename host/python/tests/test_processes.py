"""Two processes under ``ferrocomm launch --emulator``, one rank each: the package in a job shaped like
torchrun's. Needs the ``ferrocomm`` command: ``FERROCOMM_CLI`` (CI sets it), else the one on PATH, else
the workspace's build."""

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


def launch(script, n=2, timeout=300, **env):
    return subprocess.run(
        [cli(), "launch", "--emulator", "-n", str(n), "--", sys.executable, str(HERE / script)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **env},
    )


def test_two_processes_run_every_collective():
    done = launch("rank_worker.py")
    assert done.returncode == 0, done.stdout + done.stderr
    for rank in range(2):
        assert f"[rank {rank}] rank {rank}: every collective verified" in done.stdout, done.stdout


def test_a_rank_that_leaves_is_a_typed_error_not_a_hang():
    # The device timeout is the window rank 0's wait may take to end; it also limits the session's first
    # barrier, which on a loaded machine may wait for the other process, so it is seconds.
    done = launch("rank_worker.py", RANK_WORKER_FAULT="skip", FERROCOMM_TIMEOUT_MS="3000")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "[rank 1] rank 1: leaving" in done.stdout, done.stdout
    line = next((l for l in done.stdout.splitlines() if l.startswith("[rank 0] rank 0: ")), "")
    assert "PeersExitedError" in line or "DeviceTimeoutError" in line, done.stdout + done.stderr


def test_ranks_that_disagree_on_a_call_are_told_at_once():
    done = launch("rank_worker.py", RANK_WORKER_FAULT="disagree", FERROCOMM_CHECK_CALLS="1")
    assert done.returncode == 0, done.stdout + done.stderr
    for rank in range(2):
        line = next((l for l in done.stdout.splitlines() if l.startswith(f"[rank {rank}] rank {rank}: ")), "")
        assert "DisagreementError" in line and "of 16" in line and "of 17" in line, done.stdout
