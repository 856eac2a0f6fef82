"""Files and folders only their owner reads: what Waypoint writes beside a run's data.

A dev server's database holds every history (plaintext without encryption), and its log, the
server record, the trace file and the step log name runs and steps. Under the usual umask 022 they
came out world-readable while the stores beside them were 0700/0600; these helpers make every
such path private whatever the umask, and tighten one an earlier version left open.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

PRIVATE_UMASK = 0o077
"""For a child process (the dev server): what it creates is its owner's alone."""


def private_dir(path: Path) -> Path:
    """Create `path` (and its parents) and make it 0700."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    with contextlib.suppress(OSError):  # not ours to change: leave it, as before
        path.chmod(0o700)
    return path


def open_private(path: Path, flags: int) -> int:
    """`os.open` of `path` with mode 0600, tightening a file an earlier version made 0644."""
    fd = os.open(path, flags | os.O_CREAT, 0o600)
    with contextlib.suppress(OSError):
        os.fchmod(fd, 0o600)
    return fd


def write_private(path: Path, text: str) -> None:
    """Replace `path`'s content with `text`, the file 0600."""
    fd = open_private(path, os.O_WRONLY | os.O_TRUNC)
    with os.fdopen(fd, "w") as out:
        out.write(text)


def append_private(path: Path, text: str) -> None:
    """Append `text` with one write, the file 0600: what a SIGKILL cannot half-lose."""
    fd = open_private(path, os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)
