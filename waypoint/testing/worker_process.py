"""A real worker process for tests (start, SIGKILL, SIGTERM), and what its runs completed.

Workers are forked (`waypoint.testing.forked`): a kill test restarts its worker after every
kill, and a start costs a fork instead of a second of imports.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from waypoint.client import runs
from waypoint.testing.forked import ForkedProcess


class WorkerProcess:
    """A `waypoint worker` process that can be SIGKILLed and started again."""

    def __init__(self, app: str, env: Mapping[str, str], log_path: Path) -> None:
        self.app = app
        self.env = dict(env)
        self.log_path = log_path
        self.process: ForkedProcess | subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 30.0) -> None:
        """Start the worker and wait until it has connected."""
        offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        self.log_path.touch()  # read below before the worker may have opened it
        self.process = process = self._spawn()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if b"worker on queue" in self.log_path.read_bytes()[offset:]:
                return
            if process.poll() is not None:
                break
            time.sleep(0.05)
        raise RuntimeError(f"worker did not start{self.where}; see {self.log_path}")

    where = ""
    """Said of a worker that did not start: where it was started, if not here."""

    def _spawn(self) -> ForkedProcess | subprocess.Popen[bytes]:
        """The worker's process, started, its output appended to the log."""
        argv = ["worker", "--app", self.app]
        return ForkedProcess(argv, self.env, stdout=self.log_path, stderr=self.log_path)

    def kill(self) -> None:
        """SIGKILL: no cleanup, no graceful shutdown, exactly like a lost machine."""
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def stop(self) -> int:
        """SIGTERM and wait: returns the exit code, which must be 0."""
        if self.process is None:
            return 0
        if (ended := self.process.poll()) is not None:
            return ended
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=30)


async def completed_steps(client: Client, run: str) -> set[str]:
    """Step ids whose activity completion is recorded in the run's history."""
    scheduled: dict[int, str] = {}
    done: set[str] = set()
    async for event in runs.handle(client, run).fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            activity_id = event.activity_task_scheduled_event_attributes.activity_id
            scheduled[event.event_id] = activity_id.split("#")[0]
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            attrs = event.activity_task_completed_event_attributes
            done.add(scheduled[attrs.scheduled_event_id])
    return done
