"""The attempts a worker process is running, on local disk: a restart frees a dead one's at once.

A SIGKILLed worker's steps wait out their heartbeat timeout (10 s for a tool, 60 s for a model
step) before Temporal retries them elsewhere. Shorter timeouts would retry steps a starved but
live worker is still running. Instead each process writes, under
`folder/<cluster>/<boot.pid-namespace>/<pid>-<start>/`, one file per attempt it runs, holding
its task token alone, with sidecars beside it (`.run`: its workflow and run; `.spent`: what a
model step has spent so far), removed when the attempt ends. A reader takes the token and
whichever sidecars it knows, so a build that adds a sidecar never hides an attempt from an
older build that frees it; only processes of the same boot and pid namespace are ever judged, so
containers or machines sharing the folder never free each other's attempts. A worker that starts
looks for folders whose process is provably gone, that is whose pid is not running with that
start time (read from `/proc`), and fails exactly those attempts by task token, so their retries
start now, with no retry delay (an effect reconciles first, as always), and tells the server
their runs' next workflow tasks need not wait for the dead worker's sticky queue. A task token
names one attempt: failing it cannot touch a newer attempt already running elsewhere, and the
server refuses it once that attempt timed out. A freed model step hands what its cut call had
spent to its retry (the failure's heartbeat details), which records it with its own answer: the
ledger bills the call a crash cut short. Where a process's start time cannot be read (no
`/proc`), nothing is proved and nothing is freed: the heartbeat timeout stays the fallback, as
it is for a lost machine.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import logging
import os
import shutil
from collections.abc import Iterator
from contextvars import ContextVar
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio import activity
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.workflowservice.v1 import ResetStickyTaskQueueRequest
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import (
    ActivityInboundInterceptor,
    ExecuteActivityInput,
    Interceptor,
)

from waypoint.protocol import PartialSpend

log = logging.getLogger(__name__)

WORKER_DIED = "WorkerDied"
"""The failure a freed attempt gets: retryable, so its retry starts at once."""
RETRY_AT_ONCE = timedelta(milliseconds=10)
SPENT = ".spent"
"""Beside an attempt's entry: what its model call had spent, as a `PartialSpend`."""
RUN = ".run"
"""Beside an attempt's entry: its workflow id and run id, a line each."""
_entry: ContextVar[Path | None] = ContextVar("waypoint_journal_entry", default=None)


def start_time(pid: int) -> str | None:
    """When process `pid` started, in clock ticks since boot.

    None if it is not running, or if this system has no `/proc` to say.
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rpartition(")")[2].split()  # after the command name, which may hold spaces
    return fields[19] if len(fields) > 19 else None


def process_space() -> str:
    """Which processes a pid names here: this boot of this kernel, in this pid namespace.

    Containers sharing a volume, or machines sharing a disk, each number their processes
    afresh: a pid means something only where it was taken. '' when this system cannot say.
    """
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        space = os.readlink("/proc/self/ns/pid").strip("pid:[]")
    except OSError:
        return ""
    return f"{boot[:8]}.{space}"


def provably_gone(pid: int, started: str) -> bool:
    """Whether the process `pid` that started at `started` has ended (its pid may be reused)."""
    if not Path("/proc/self/stat").exists():
        return False  # nothing can be proved here
    return start_time(pid) != started


class AttemptJournal:
    """This process's running attempts, and the dead processes' attempts it can free."""

    def __init__(self, folder: Path, client: Client | None = None) -> None:
        cluster = client.service_client.config.target_host if client else ""
        where = f"{cluster}/{client.namespace if client else ''}"
        # One folder per cluster and namespace (a token is another server's nonsense), and per
        # process space (a pid is another container's, or another boot's, nonsense).
        cluster_folder = Path(folder) / hashlib.sha256(where.encode()).hexdigest()[:12]
        self.folder = cluster_folder / (process_space() or "unknown")
        pid = os.getpid()
        self.mine = self.folder / f"{pid}-{start_time(pid) or 'unknown'}"

    @contextlib.contextmanager
    def running(self, task_token: bytes) -> Iterator[None]:
        """Note the attempt for as long as it runs."""
        entry = self.mine / hashlib.sha256(task_token).hexdigest()
        try:
            info = activity.info()
            noted_run = f"{info.workflow_id}\n{info.workflow_run_id}"
        except RuntimeError:  # not in an activity (a test): the token alone frees the attempt
            noted_run = ""
        try:
            self.mine.mkdir(parents=True, exist_ok=True)
            entry.write_text(base64.b64encode(task_token).decode())
            if noted_run:
                entry.with_suffix(RUN).write_text(noted_run)
        except OSError as err:  # a full or read-only disk must not fail the step
            log.warning("attempt journal %s not written: %s", self.folder, err)
        noted = _entry.set(entry)
        try:
            yield
        finally:
            _entry.reset(noted)
            with contextlib.suppress(OSError):  # a disk gone read-only raises EROFS here
                entry.unlink(missing_ok=True)
                entry.with_suffix(RUN).unlink(missing_ok=True)
                entry.with_suffix(SPENT).unlink(missing_ok=True)

    async def free_dead(self, client: Client) -> int:
        """Fail the attempts of every process that provably ended; how many were freed."""
        freed = 0
        for folder in sorted(self.folder.glob("*-*")) if self.folder.is_dir() else []:
            pid, _, started = folder.name.partition("-")
            judged = pid.isdigit() and started.isdigit() and self.folder.name != "unknown"
            if not judged or folder == self.mine:
                continue  # a process whose start time was never read proves nothing
            if not provably_gone(int(pid), started):
                continue
            try:
                entries = list(folder.iterdir())
            except OSError:  # another starting worker removed it, or it is not ours to read
                continue
            settled = True
            for entry in entries:
                if entry.suffix:
                    continue  # a sidecar, read with its attempt's entry
                try:
                    token_bytes = base64.b64decode(entry.read_text(), validate=True)
                except (OSError, ValueError):
                    continue  # half written when the process died: nothing to free
                outcome = await _fail(client, token_bytes, folder.name, _spent(entry))
                if outcome and len(run := _run(entry)) == 2:
                    await _unstick(client, *run)
                freed += outcome is True
                settled = settled and outcome is not None
            if settled:  # else the server was out of reach: the next start tries again
                shutil.rmtree(folder, ignore_errors=True)
        return freed


def note_spend(spent: PartialSpend) -> None:
    """Keep what the running model step has spent beside its attempt (a no-op outside one)."""
    entry = _entry.get()
    if entry is None:
        return
    with contextlib.suppress(OSError):
        fresh = entry.with_suffix(".tmp")
        fresh.write_text(spent.model_dump_json())
        fresh.replace(entry.with_suffix(SPENT))


def _run(entry: Path) -> list[str]:
    """The workflow id and run id a dead attempt noted, or [] if it did not get to."""
    try:
        return entry.with_suffix(RUN).read_text().split("\n")
    except OSError:
        return []


def _spent(entry: Path) -> PartialSpend | None:
    """What a dead attempt had spent, if it said (a torn or odd file says nothing)."""
    try:
        return PartialSpend.model_validate_json(entry.with_suffix(SPENT).read_bytes())
    except (OSError, ValueError):
        return None


async def _fail(
    client: Client, token: bytes, process: str, spent: PartialSpend | None = None
) -> bool | None:
    """True: freed; False: nothing to free; None: the server could not be asked."""
    handle = client.get_async_activity_handle(task_token=token)
    try:
        await handle.fail(
            ApplicationError(
                f"the worker process {process} running it died",
                type=WORKER_DIED,
                next_retry_delay=RETRY_AT_ONCE,  # it was proved dead: nothing to wait for
            ),
            last_heartbeat_details=[spent] if spent is not None else [],
        )
    except RPCError as err:  # it had ended, timed out, or another worker freed it first
        return None if err.status == RPCStatusCode.UNAVAILABLE else False
    log.info("freed an attempt of the dead worker process %s", process)
    return True


async def _unstick(client: Client, workflow_id: str, run_id: str) -> None:
    """Send the run's next workflow task to its normal queue, not the dead worker's sticky one.

    Else it waits out the sticky queue's schedule-to-start timeout. Best effort: at worst the
    run waits that long, as without the journal.
    """
    request = ResetStickyTaskQueueRequest(
        namespace=client.namespace,
        execution=WorkflowExecution(workflow_id=workflow_id, run_id=run_id),
    )
    with contextlib.suppress(RPCError):
        await client.workflow_service.reset_sticky_task_queue(request)


class JournalInterceptor(Interceptor):
    """Writes each activity attempt into the journal while it runs."""

    def __init__(self, journal: AttemptJournal) -> None:
        self.journal = journal

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        """Journal every attempt."""
        return _Journaled(next, self.journal)


class _Journaled(ActivityInboundInterceptor):
    def __init__(self, next: ActivityInboundInterceptor, journal: AttemptJournal) -> None:
        super().__init__(next)
        self.journal = journal

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        with self.journal.running(activity.info().task_token):
            return await super().execute_activity(input)
