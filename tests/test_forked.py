"""Forked `waypoint` processes keep a process's promises: own env, output, exit code, end."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from temporalio.testing import WorkflowEnvironment

from tests.cli import ROOT
from waypoint.testing.forked import ForkedProcess, run


def test_a_forked_command_has_its_own_environment_output_and_exit_code(tmp_path: Path) -> None:
    env = {**os.environ, "TEMPORAL_ADDRESS": "127.0.0.1:1", "WAYPOINT_HOME": str(tmp_path)}
    done = run(["status", "nosuch"], env, cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "127.0.0.1:1" in done.stderr and "Traceback" not in done.stderr
    assert done.stdout == ""
    assert run(["--help"], env).returncode == 0


def test_a_forked_worker_ends_on_sigkill_and_a_command_past_its_timeout_is_killed(
    env: WorkflowEnvironment, tmp_path: Path, task_queue: str
) -> None:
    worker_env = {
        **os.environ,
        "TEMPORAL_ADDRESS": env.client.service_client.config.target_host,
        "WAYPOINT_TASK_QUEUE": task_queue,
        "WAYPOINT_TEST_PAYMENTS": str(tmp_path / "payments.db"),
        "PYTHONPATH": str(ROOT),
    }
    log = tmp_path / "worker.log"
    log.touch()
    worker = ForkedProcess(
        ["worker", "--app", "tests.cli_app:agents"], worker_env, stdout=log, stderr=log
    )
    deadline = time.monotonic() + 60
    while b"worker on queue" not in log.read_bytes():
        assert worker.poll() is None and time.monotonic() < deadline, log.read_text()
        time.sleep(0.05)
    assert task_queue in log.read_text()  # it read the environment it was given
    worker.send_signal(signal.SIGKILL)
    assert worker.wait(timeout=30) == -signal.SIGKILL

    started = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        run(["worker", "--app", "tests.cli_app:agents"], worker_env, timeout=2)
    assert time.monotonic() - started < 30
