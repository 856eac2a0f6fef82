"""Run the `waypoint` CLI as a user does, as a process of its own, and read what it prints.

The process is forked from one that has already imported Waypoint (`waypoint.testing.forked`):
the same `main` the console script runs, with its own environment, output and exit code, for a
fraction of a start's CPU. Tests of the installed console script itself (`test_demo`, the
README's and the docs' blocks, the worker in `test_cli`) still run it with `subprocess`.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from waypoint.testing import forked

BIN = Path(sys.executable).parent
ROOT = Path(__file__).parent.parent


def waypoint(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """`waypoint ARGS` from the repository root; its exit code is the caller's to check."""
    return forked.run(list(args), env, cwd=ROOT, timeout=60)


def installed(
    env: Mapping[str, str],
    *args: str,
    cwd: Path = ROOT,
    timeout: float = 60,
    stdin: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """The installed `waypoint ARGS` run to its end; its exit code is the caller's to check."""
    command = [str(BIN / "waypoint"), *args]
    return subprocess.run(
        command, env=env, cwd=cwd, input=stdin, capture_output=True, text=True, timeout=timeout
    )


def spawn(
    env: Mapping[str, str], *args: str, cwd: Path = ROOT, merged: bool = False
) -> subprocess.Popen[str]:
    """The installed `waypoint ARGS` as a process of its own, for a server read as it prints.

    `merged` sends its stderr into stdout, where a test reads the whole log in order.
    """
    command = [str(BIN / "waypoint"), *args]
    errors = subprocess.STDOUT if merged else subprocess.PIPE
    return subprocess.Popen(
        command, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=errors, text=True
    )


def first_line(proc: subprocess.Popen[str]) -> str:
    """The first line a spawned process prints: a server says there where it listens."""
    assert proc.stdout is not None
    return proc.stdout.readline()


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
        # Reads what it still prints: a child blocked on a full pipe could never exit.
        proc.communicate(timeout=30)  # a loaded machine may take a while to exit
        code = proc.returncode
    except subprocess.TimeoutExpired:
        print(stuck(proc.pid), file=sys.stderr)  # shown with the failure that follows
        proc.kill()
        code = proc.wait()
    for stream in (proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()
    return code


def stuck(pid: int) -> str:
    """What a process that ignored a stop signal was doing: its signal masks and its threads.

    The codec server has twice outlived SIGINT by 30 s in CI runs and never here; this is what
    the next such failure shows.
    """
    proc = Path(f"/proc/{pid}")
    try:
        status = [
            line
            for line in (proc / "status").read_text().splitlines()
            if line.split(":")[0]
            in {"State", "Threads", "SigPnd", "ShdPnd", "SigBlk", "SigIgn", "SigCgt"}
        ]
        threads = [
            f"{(t / 'comm').read_text().strip()} in {(t / 'wchan').read_text()} "
            f"(syscall {(t / 'syscall').read_text().split()[0]})"
            for t in sorted((proc / "task").iterdir())
        ]
    except OSError as err:
        return f"process {pid} did not stop; /proc unreadable: {err}"
    return f"process {pid} did not stop: " + "; ".join(status + threads)
