"""Crash-test barriers: park an effect tool at a named point so a test can kill the worker there.

A barrier is a file `<point>.<tool>` (e.g. `before_commit.create_vendor`) in the barrier folder.
When a tool reaches an existing barrier it deletes it (a barrier is one-shot, so the restarted
worker runs through), writes `reached.<point>.<tool>` holding its pid, and blocks its thread
forever: the test waits for that file, then SIGKILLs the worker at exactly that point.
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable
from pathlib import Path


class Barriers:
    """The barriers of one folder; with no folder every check passes at once."""

    def __init__(self, folder: Path | None) -> None:
        self.folder = folder

    def check(self, point: str, tool: str) -> None:
        """Block forever if the barrier `<point>.<tool>` is set; return at once otherwise."""
        if self.folder is None:
            return
        try:
            (self.folder / f"{point}.{tool}").unlink()
        except FileNotFoundError:
            return
        tmp = self.folder / f".reached.{point}.{tool}.{os.getpid()}"
        tmp.write_text(f"{os.getpid()}\n")
        os.replace(tmp, self.folder / f"reached.{point}.{tool}")
        threading.Event().wait()

    def hook(self, point: str, tool: str) -> Callable[[], None] | None:
        """The check as a callback for a downstream write, or None when no folder is set."""
        return functools.partial(self.check, point, tool) if self.folder else None
