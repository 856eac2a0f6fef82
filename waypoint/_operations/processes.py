"""Ports and processes on this machine: is a port free, is a pid alive, what is its argv."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path

HOST = "127.0.0.1"


def free_port() -> int:
    """A port nothing on 127.0.0.1 listens on right now; another program may take it later."""
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def port_taken(port: int) -> bool:
    """Whether binding 127.0.0.1:`port` fails, as the server's own bind would."""
    with socket.socket() as sock:
        # Like the server's listener, so a recently closed port in TIME_WAIT still counts as free.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((HOST, port))
        except OSError:
            return True
    return False


def accepts(port: int) -> bool:
    """Whether something accepts TCP connections on 127.0.0.1:`port`."""
    try:
        with socket.create_connection((HOST, port), timeout=0.2):
            return True
    except OSError:
        return False


def tail(path: Path, lines: int = 20) -> str:
    """The last lines of a log file, for error messages."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:]) or "(empty log)"


def cmdline(pid: int) -> list[str] | None:
    """A process's argv, from /proc where there is one, else from `ps`."""
    if Path("/proc/self").exists():
        try:
            return Path(f"/proc/{pid}/cmdline").read_text(errors="replace").split("\0")[:-1] or None
        except OSError:
            return None
    done = subprocess.run(
        ["ps", "-ww", "-o", "command=", "-p", str(pid)], capture_output=True, text=True
    )
    return done.stdout.split() or None


def alive(pid: int) -> bool:
    """Whether `pid` is running; a zombie awaiting its parent's wait counts as gone."""
    if Path("/proc/self").exists():
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return False
        return state not in ("Z", "X")
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def wait_for_exit(pid: int, timeout: float) -> bool:
    """Poll until a process that is not our child has exited; whether it did in time."""
    deadline = time.monotonic() + timeout
    while alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def flag(command: list[str], name: str) -> str | None:
    """The value after `name` in an argv as `dev_server_command` writes it."""
    at = command.index(name) if name in command else len(command)
    return command[at + 1] if at + 1 < len(command) else None
