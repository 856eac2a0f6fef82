"""`waypoint` commands in processes forked from one that has already imported Waypoint.

A `waypoint` process spends about a second of CPU importing the Temporal SDK, pydantic and
Waypoint before it does anything; a kill test starts a worker after every kill, and a test
suite runs the CLI hundreds of times. `multiprocessing`'s forkserver imports them once and
forks each process from there. Each is still a process of its own, with its own pid,
environment, working directory, output and exit code (it runs the entry point the installed
`waypoint` script runs), that a SIGKILL ends on the spot. Your app is imported in the forked
process, as `waypoint worker --app` would: never in the forkserver, since an app may open
connections at import that a fork must not share. One thing it does not get anew: rich picks
colours when the CLI is imported, in the forkserver, from the terminal and FORCE_COLOR/NO_COLOR
the forkserver saw (tests run without a terminal, so without colour).
"""

from __future__ import annotations

import atexit
import contextlib
import multiprocessing
import multiprocessing.context
import multiprocessing.forkserver
import multiprocessing.process
import os
import signal
import subprocess
import sys
import tempfile
import threading
import weakref
from collections.abc import Mapping
from importlib.metadata import entry_points
from pathlib import Path

PRELOADED = ["waypoint._cli", "waypoint._worker", "waypoint._providers.pricing"]
"""What the forkserver imports once, for every process it forks."""


class ForkedProcess:
    """`waypoint ARGV` in a forked process, with the `subprocess.Popen` calls tests make."""

    def __init__(
        self,
        argv: list[str],
        env: Mapping[str, str],
        stdout: Path,
        stderr: Path,
        cwd: Path | None = None,
    ) -> None:
        self.args = argv
        for path in (stdout, stderr):
            path.touch()  # there to read even if the process dies before it opens them
        self._process = _forkserver().Process(
            target=_main,
            args=(argv, dict(env), str(stdout), str(stderr), str(cwd) if cwd else None),
        )
        _start(self._process)
        assert self._process.pid is not None  # set by start()
        self.pid: int = self._process.pid

    @property
    def returncode(self) -> int | None:
        """The exit code, negative for the signal that ended it; None while it runs."""
        return self._process.exitcode

    def poll(self) -> int | None:
        """The exit code once it has ended, else None."""
        return self._process.exitcode

    def wait(self, timeout: float | None = None) -> int:
        """The exit code once it ends; `subprocess.TimeoutExpired` past `timeout` seconds."""
        self._process.join(timeout)
        if self._process.exitcode is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        return self._process.exitcode

    def send_signal(self, sig: int) -> None:
        """Send `sig` unless it has already ended."""
        if self.poll() is None:
            os.kill(self.pid, sig)


_lock = threading.Lock()
_ready = False
_started: weakref.WeakSet[multiprocessing.process.BaseProcess] = weakref.WeakSet()


def _forkserver() -> multiprocessing.context.ForkServerContext:
    """The forkserver context, its server started (once) with `PRELOADED` imported.

    It starts without COLUMNS and LINES: rich fixes a console's size from them when it builds
    the console at import, and each forked process must get its own.
    """
    global _ready
    context = multiprocessing.get_context("forkserver")
    with _lock:
        if not _ready:
            context.set_forkserver_preload(PRELOADED)
            sizes = {n: os.environ.pop(n) for n in ("COLUMNS", "LINES") if n in os.environ}
            try:
                multiprocessing.forkserver.ensure_running()
            finally:
                os.environ.update(sizes)
            _ready = True
    return context


def _start(process: multiprocessing.process.BaseProcess) -> None:
    """Start `process` without multiprocessing running the caller's main script in it again.

    multiprocessing re-runs `__main__` in each child (as `__mp_main__`): a user's kill-test
    script would run once per worker, and fail there without an `if __name__` guard.
    """
    main = sys.modules["__main__"]
    with _lock:
        spec, path = getattr(main, "__spec__", None), main.__dict__.pop("__file__", None)
        main.__spec__ = None
        try:
            process.start()
        finally:
            main.__spec__ = spec
            if path is not None:
                main.__file__ = path
    _started.add(process)


@atexit.register
def _end_left_running() -> None:
    """SIGKILL what this process forked and left running: multiprocessing would wait for it."""
    for process in list(_started):
        if process.exitcode is None and process.pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGKILL)


def run(
    argv: list[str], env: Mapping[str, str], cwd: Path | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """`waypoint ARGV` to its end, what it printed captured: `subprocess.run`'s answer.

    Raises:
        subprocess.TimeoutExpired: It ran past `timeout` seconds (it is killed first).
    """
    with tempfile.TemporaryDirectory(prefix="waypoint-cli-") as folder:
        out, err = Path(folder) / "stdout", Path(folder) / "stderr"
        process = ForkedProcess(argv, env, stdout=out, stderr=err, cwd=cwd)
        try:
            code = process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGKILL)
            process.wait()
            raise
        said = out.read_text(errors="replace"), err.read_text(errors="replace")
    return subprocess.CompletedProcess(["waypoint", *argv], code, *said)


def _main(argv: list[str], env: dict[str, str], stdout: str, stderr: str, cwd: str | None) -> None:
    """In the forked process: its own output, environment, folder and `sys.path`, then the CLI."""
    for fd, path in ((1, stdout), (2, stderr)):
        opened = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(opened, fd)
        os.close(opened)
    os.environ.clear()
    os.environ.update(env)
    if cwd:
        os.chdir(cwd)
    sys.path[:0] = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    sys.argv = ["waypoint", *argv]
    (script,) = entry_points(group="console_scripts", name="waypoint")
    script.load()()  # what the installed `waypoint` runs; exits with the command's code
