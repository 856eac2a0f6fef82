"""Run the `waypoint` CLI as a user does, as a subprocess, and read what it prints."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

BIN = Path(sys.executable).parent
ROOT = Path(__file__).parent.parent


def waypoint(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """`waypoint ARGS` from the repository root; its exit code is the caller's to check."""
    return subprocess.run(
        [str(BIN / "waypoint"), *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def wait_for(env: dict[str, str], run: str, state: str, tries: int = 150) -> str:
    """`waypoint status RUN` until it shows `state`; returns what it printed then."""
    shown = ""
    for _ in range(tries):
        status = waypoint(env, "status", run)
        assert status.returncode == 0, status.stderr
        shown = status.stdout
        if re.search(rf"state\s+{state}", shown):
            return shown
        time.sleep(0.2)
    raise AssertionError(f"{run} never reached {state}: {shown}")


def started_id(proc: subprocess.CompletedProcess[str]) -> str:
    """The run id `waypoint start` printed, with its Web UI link."""
    assert proc.returncode == 0, proc.stderr
    match = re.search(r"started (\S+)", proc.stdout)
    assert match, proc.stdout
    assert f"/workflows/{match.group(1)}" in proc.stdout
    return match.group(1)


def stop(proc: subprocess.Popen[str], sig: int = signal.SIGINT) -> int:
    """Send `sig` and return the exit code; kill it if it lingers, so no server is left behind."""
    proc.send_signal(sig)
    try:
        code = proc.wait(timeout=30)  # a loaded machine may take a while to exit
    except subprocess.TimeoutExpired:
        proc.kill()
        code = proc.wait()
    for stream in (proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()
    return code
