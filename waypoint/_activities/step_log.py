"""An append-only log of every step execution a worker starts, for proving what re-ran.

Off unless `WAYPOINT_STEP_LOG` names a file. Kill tests read it across the worker processes they
SIGKILLed: a completed step must appear once, only in-flight work may appear again.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

from temporalio import activity

from waypoint._security.private import append_private


class StepLog:
    """Writes `workflow_id step_id attempt local pid` lines, each with one unbuffered append."""

    def __init__(self, path: Path | None) -> None:
        self.path = path

    def write(self, step_id: str, attempt: int) -> None:
        """Record that this process starts executing a step."""
        if self.path is not None:
            info = activity.info()
            line = f"{info.workflow_id} {step_id} {attempt} {int(info.is_local)} {os.getpid()}\n"
            append_private(self.path, line)


class Execution(NamedTuple):
    """One logged start of a step."""

    step_id: str
    attempt: int
    local: bool
    pid: int


def read_step_log(path: Path, workflow_id: str) -> list[Execution]:
    """The executions logged for one run, in order."""
    if not path.exists():
        return []
    entries = []
    for line in path.read_text().splitlines():
        wf, step_id, attempt, local, pid = line.split(" ")
        if wf == workflow_id:
            entries.append(Execution(step_id, int(attempt), local == "1", int(pid)))
    return entries
