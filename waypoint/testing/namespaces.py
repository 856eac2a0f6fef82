"""A `waypoint worker` in a pid namespace of its own, as a container or a pod runs it.

A restarted container gets a new pid namespace, and a sidecar may see the host's `/proc` from
its own: what the attempt journal proves must hold there. These workers are started with
util-linux's `unshare` (root only): `own_proc` mounts the namespace's own `/proc`, as a container
does; without it the worker sees the host's. `join` starts it in a running worker's namespace
instead, and `read_only` mounts a folder read-only for it alone.
"""

from __future__ import annotations

import functools
import os
import shlex
import shutil
import signal
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from waypoint.testing.worker_process import WorkerProcess


@functools.cache
def why_not() -> str:
    """'' where this process can start workers in new pid namespaces; else why it cannot."""
    if sys.platform != "linux" or os.geteuid() != 0:
        return "pid namespaces need root on Linux (`unshare --pid`)"
    if shutil.which("unshare") is None or shutil.which("nsenter") is None:
        return "util-linux's unshare and nsenter are not installed"
    tried = subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", "true"], capture_output=True, timeout=30
    )
    if tried.returncode:
        return f"unshare --pid --mount-proc failed here: {tried.stderr.decode().strip()}"
    return ""


class NamespacedWorker(WorkerProcess):
    """A worker process in a new pid namespace (or `join`'s), SIGKILLed as a container is."""

    def __init__(
        self,
        app: str,
        env: Mapping[str, str],
        log_path: Path,
        *,
        own_proc: bool = True,
        join: NamespacedWorker | None = None,
        read_only: Path | None = None,
        pid: int | None = None,
    ) -> None:
        super().__init__(app, env, log_path)
        self.own_proc = own_proc
        self.join = join
        self.read_only = read_only
        self.pid = pid
        """The pid the worker gets inside its namespace (a new namespace only), e.g. one
        that names another process in the host's `/proc`."""

    def command(self) -> list[str]:
        """The argv that starts the worker in its namespace."""
        worker = shlex.join([sys.executable, "-m", "waypoint", "worker", "--app", self.app])
        if self.join is not None:
            return ["nsenter", "--target", str(self.join.worker_pid()), "--pid", "--", "sh", "-c",
                    f"exec {worker}"]  # fmt: skip
        steps = ["set -e"]
        if self.read_only is not None:
            where = shlex.quote(str(self.read_only))
            steps += [f"mount --bind {where} {where}", f"mount -o remount,bind,ro {where}"]
        if self.pid is not None:  # the next pid this namespace hands out: the worker's
            steps.append(f"echo {self.pid - 1} > /proc/sys/kernel/ns_last_pid")
        # The shell stays the namespace's init, as a container's init does: an init ignores a
        # SIGKILL from inside its namespace, its own included (a torture fault sends one).
        steps.append(f"{worker} & wait $!")
        mounts = ["--mount-proc"] if self.own_proc else []
        if self.read_only is not None:
            mounts.append("--mount")
        return ["unshare", "--pid", "--fork", "--kill-child", *mounts, "sh", "-c", "; ".join(steps)]

    where = " in its namespace"

    def start(self, timeout: float = 60.0) -> None:
        """Start the worker and wait until it has connected."""
        super().start(timeout)

    def _spawn(self) -> subprocess.Popen[bytes]:
        with self.log_path.open("ab") as log:
            return subprocess.Popen(
                self.command(), env=self.env, stdout=log, stderr=subprocess.STDOUT
            )

    def init_pid(self) -> int:
        """The host's pid of the first process `unshare` or `nsenter` started.

        In a new namespace that is its init (a shell), whose death ends every process in it.
        """
        assert self.process is not None
        return _child(self.process.pid)

    def worker_pid(self) -> int:
        """The host's pid of the worker process (its namespace's pid is another number)."""
        pid = self.init_pid()
        return _child(pid) if _name(pid) == "sh" else pid

    def kill(self) -> None:
        """SIGKILL the worker (in a new namespace: every process in it), then reap it."""
        if self.process is not None and self.process.poll() is None:
            try:  # a new namespace's init: the kernel ends the others with it
                os.kill(self.init_pid(), signal.SIGKILL)
            except ProcessLookupError:
                self.process.send_signal(signal.SIGKILL)  # --kill-child ends the worker
            self.process.wait()

    def stop(self) -> int:
        """SIGTERM the worker and wait: returns its exit code, which must be 0."""
        if self.process is None:
            return 0
        if (ended := self.process.poll()) is not None:
            return 128 - ended if ended > 128 else ended
        try:
            os.kill(self.worker_pid(), signal.SIGTERM)
        except ProcessLookupError:
            pass
        code = self.process.wait(timeout=30)
        return 128 - code if code > 128 else code  # the shell's 128+N: killed by signal N


def _stat(pid: int) -> tuple[str, list[str]]:
    """A process's name and the fields after it, from the host's `/proc` (the tests' own)."""
    name, _, rest = Path(f"/proc/{pid}/stat").read_text().partition(" (")
    command, _, fields = rest.rpartition(")")
    return command, fields.split()


def _name(pid: int) -> str:
    try:
        return _stat(pid)[0]
    except OSError:
        return ""


def _child(parent: int) -> int:
    """The one process whose parent is `parent`."""
    for stat in Path("/proc").glob("[0-9]*"):
        try:
            if int(_stat(int(stat.name))[1][1]) == parent:
                return int(stat.name)
        except (OSError, IndexError, ValueError):
            continue
    raise ProcessLookupError(f"process {parent} has no child")
