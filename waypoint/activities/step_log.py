"""An append-only log of every step execution a worker starts, for proving what re-ran.

Off unless `WAYPOINT_STEP_LOG` names a file. Kill tests read it across the worker processes they
SIGKILLed: a completed step must appear once, only in-flight work may appear again.
"""

from __future__ import annotations

import os
from pathlib import Path

from temporalio import activity


class StepLog:
    """Writes `workflow_id step_id attempt pid` lines, each with one unbuffered append."""

    def __init__(self, path: Path | None) -> None:
        self.path = path

    def write(self, step_id: str, attempt: int) -> None:
        """Record that this process starts executing a step."""
        if self.path is None:
            return
        line = f"{activity.info().workflow_id} {step_id} {attempt} {os.getpid()}\n"
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)


def read_step_log(path: Path, workflow_id: str) -> list[tuple[str, int]]:
    """The (step_id, attempt) executions logged for one run, in order."""
    if not path.exists():
        return []
    entries = []
    for line in path.read_text().splitlines():
        wf, step_id, attempt, _pid = line.split(" ")
        if wf == workflow_id:
            entries.append((step_id, int(attempt)))
    return entries
