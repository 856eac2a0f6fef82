"""Forked `waypoint` processes keep a process's promises: own env, output, exit code, end."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

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
    cli_env: dict[str, str], tmp_path: Path, task_queue: str
) -> None:
    worker_env = cli_env
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


def test_a_script_without_a_main_guard_forks_and_its_leftovers_end_with_it(tmp_path: Path) -> None:
    """multiprocessing re-runs the caller's `__main__` in each child unless told not to; and
    at exit it would wait for children still running (a worker draining for 30 s)."""
    script = tmp_path / "no_guard.py"
    script.write_text(
        "import os, sys\n"
        "from pathlib import Path\n"
        "from waypoint.testing.forked import ForkedProcess, run\n"
        "print('ran', run(['--help'], dict(os.environ)).returncode, flush=True)\n"
        "env = {**os.environ, 'WAYPOINT_ENCRYPTION_KEYS': 'k1:' + 'A' * 43 + '=',\n"
        "       'WAYPOINT_CODEC_TOKEN': 's3cret'}\n"
        "out = Path(sys.argv[1])\n"
        "left = ForkedProcess(['codec-server', '--port', '0'], env, stdout=out, stderr=out)\n"
        "print('left', left.pid, flush=True)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "left.log")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("ran 0") == 1, done.stdout + done.stderr
    assert time.monotonic() - started < 60
    pid = int(done.stdout.split("left ")[1].split()[0])
    deadline = time.monotonic() + 10
    while (
        Path(f"/proc/{pid}").exists()
        and "Z" not in Path(f"/proc/{pid}/stat").read_text().split()[2]
    ):
        assert time.monotonic() < deadline, f"forked process {pid} outlived its starter"
        time.sleep(0.05)
