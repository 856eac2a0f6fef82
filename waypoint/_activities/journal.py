"""The attempts a worker process is running, on local disk: a restart frees a dead one's at once.

A SIGKILLed worker's steps wait out their heartbeat timeout (10 s for a tool, 60 s for a model
step) before Temporal retries them elsewhere. Shorter timeouts would retry steps a starved but
live worker is still running. Instead each process, for its whole life, holds an exclusive
`flock` on a file of its own, `folder/<cluster>/<boot>/<id>.lock`, and writes into `<id>/` one
file per attempt it runs, holding its task token alone, with sidecars beside it (`.run`: its
workflow and run; `.spent`: what a model step has spent so far), removed a little after the
attempt ends (its result may not have reached the server yet). A reader takes the token and
whichever sidecars it knows, so a build that adds a sidecar never hides an attempt from an
older build that frees it.

The proof that a process is gone is the kernel's: it drops a process's locks as the process
exits (a zombie, killed but not yet reaped, holds none), whatever pid namespace, container or
mount either side is in, so a worker that can take another's lock knows that no code of it
runs. A pid or a `/proc` entry proves nothing: pids are numbered afresh in every pid namespace,
and a `/proc` may be another namespace's. A worker that starts takes each lock it can, fails
exactly those attempts by task token, so their retries start now with no retry delay (an effect
reconciles first, as always), tells the server their runs' next workflow tasks need not wait
for the dead worker's sticky queue, and removes the dead folder once every attempt in it is
settled. A task token names one attempt: failing it cannot touch a newer attempt already running
elsewhere, and the server refuses it once that attempt timed out. A freed model step hands what
its cut call had spent to its retry (the failure's heartbeat details), which records it with its
own answer: the ledger bills the call a crash cut short.

Only folders of this kernel's boot are judged (`/proc/sys/kernel/random/boot_id`, the same in
every container of a node): a lock on a disk other machines share (NFS) can be lost while its
holder runs, and a sandboxed container (gVisor) keeps locks of its own. Where the proof is not
available (no boot id, a volume without locks, read-only, or another node), this process writes
nothing and frees nothing it cannot prove: the heartbeat timeout stays the fallback, as it is
for a lost machine. It is also what frees a step a worker took from the queue but died before
the step reached this journal (the outermost interceptor): every step has one, the quick ones
`StepOptions.tool_heartbeat_timeout`.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import logging
import os
import shutil
import uuid
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

try:
    import fcntl
except ImportError:  # Windows: no flock, so nothing is ever proved gone there
    fcntl = None

log = logging.getLogger(__name__)

WORKER_DIED = "WorkerDied"
"""The failure a freed attempt gets: retryable, so its retry starts at once."""
RETRY_AT_ONCE = timedelta(milliseconds=10)
SPENT = ".spent"
"""Beside an attempt's entry: what its model call had spent, as a `PartialSpend`."""
RUN = ".run"
"""Beside an attempt's entry: its workflow id and run id, a line each."""
LINGER = 10.0
"""Seconds an attempt's entry stays after its code returned, while the SDK reports the result:
a kill before the server has it leaves the attempt to be freed, not timed out (failing one the
server has already closed is refused, harmlessly)."""
LOCK = ".lock"
"""Beside a process's folder: the file it holds an exclusive `flock` on while it lives."""
_entry: ContextVar[Path | None] = ContextVar("waypoint_journal_entry", default=None)


def boot_id() -> str:
    """This boot of this kernel, which every container on the node shares; '' if unknown."""
    if fcntl is None:
        return ""  # no locks to scope
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def lock_if_gone(lock: Path) -> int | None:
    """An open file holding the lock on `lock`, if its process is provably gone; else None.

    None too where the lock cannot be opened or taken at all: nothing is proved there.
    """
    if fcntl is None:
        return None
    try:
        fd = os.open(lock, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:  # removed by another starting worker, or not ours to read
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:  # held: its process (or a child it forked) may still run; or no locks here
        os.close(fd)
        return None
    return fd


class AttemptJournal:
    """This process's running attempts, and the dead processes' attempts it can free."""

    def __init__(self, folder: Path, client: Client | None = None) -> None:
        cluster = client.service_client.config.target_host if client else ""
        where = f"{cluster}/{client.namespace if client else ''}"
        # One folder per cluster and namespace (a token is another server's nonsense), and per
        # boot (a lock is only this kernel's word).
        cluster_folder = Path(folder) / hashlib.sha256(where.encode()).hexdigest()[:12]
        self.boot = boot_id()
        self.folder = cluster_folder / (self.boot or "unknown")
        self.mine: Path | None = None
        """This process's folder, once it holds its lock (`open`)."""
        self._held: int | None = None
        self._unavailable = False

    def open(self) -> bool:
        """Take this process's lock and folder, for as long as it lives; False where it cannot.

        A new name each time, made and locked before its folder exists; a reader that took
        the file in between (and judged it gone) removed it, and the next name is tried.
        """
        if self._held is not None or self._unavailable:
            return self._held is not None
        if not self.boot or fcntl is None:
            return self._give_up("no file locks, or no boot id to scope them to")
        for _ in range(3):
            name = uuid.uuid4().hex
            lock = self.folder / f"{name}{LOCK}"
            try:
                self.folder.mkdir(parents=True, exist_ok=True)
                held = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
            except OSError as err:  # read-only, full, or not ours to write
                return self._give_up(str(err))
            try:
                fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
                same = os.fstat(held)
                there = os.stat(lock)
                if (same.st_dev, same.st_ino) != (there.st_dev, there.st_ino):
                    raise FileNotFoundError(lock)
                (self.folder / name).mkdir()
            except (BlockingIOError, FileNotFoundError):  # a reader judged it first
                os.close(held)
                continue
            except OSError as err:  # no locks on this volume: nothing here could prove it gone
                os.close(held)
                with contextlib.suppress(OSError):
                    lock.unlink()
                return self._give_up(str(err))
            self._held, self.mine = held, self.folder / name
            return True
        return self._give_up("another process kept removing its lock")

    def _give_up(self, why: str) -> bool:
        self._unavailable = True
        log.warning(
            "attempt journal off under %s (%s): a killed worker's steps wait for their "
            "heartbeat timeout",
            self.folder,
            why,
        )
        return False

    def close(self) -> None:
        """Remove this process's folder, then let go of its lock (on a clean stop)."""
        held, mine = self._held, self.mine
        if held is None or mine is None:
            return
        self._held, self.mine = None, None
        shutil.rmtree(mine, ignore_errors=True)
        with contextlib.suppress(OSError):
            mine.with_name(f"{mine.name}{LOCK}").unlink()
        os.close(held)

    @contextlib.contextmanager
    def running(self, task_token: bytes) -> Iterator[None]:
        """Note the attempt for as long as it runs."""
        if not self.open() or self.mine is None:
            yield
            return
        entry = self.mine / hashlib.sha256(task_token).hexdigest()
        try:
            info = activity.info()
            noted_run = f"{info.workflow_id}\n{info.workflow_run_id}"
        except RuntimeError:  # not in an activity (a test): the token alone frees the attempt
            noted_run = ""
        try:
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
            try:  # the SDK reports the result after this: a kill meanwhile loses it
                asyncio.get_running_loop().call_later(LINGER, _remove, entry)
            except RuntimeError:  # no event loop (a test): at once
                _remove(entry)

    async def free_dead(self, client: Client) -> int:
        """Fail the attempts of every process that provably ended; how many were freed."""
        if not self.boot or not self.folder.is_dir():
            return 0
        freed, runs = 0, set[tuple[str, str]]()
        for lock in sorted(self.folder.glob(f"*{LOCK}")):
            if self.mine is not None and lock.stem == self.mine.name:
                continue
            held = lock_if_gone(lock)
            if held is None:
                continue
            try:  # holding its lock: no other starting worker frees the same attempts
                folder = lock.with_suffix("")
                settled, count = await _free(client, folder, runs)
                freed += count
                if settled:  # else the server was out of reach: the next start tries again
                    shutil.rmtree(folder, ignore_errors=True)
                    with contextlib.suppress(OSError):  # read-only: nothing to tidy
                        lock.unlink()
            finally:
                os.close(held)
        # Last: the server keeps a reset in memory only, and a refused fail of the same run
        # (an attempt that had ended) reloads the run's state without it.
        for run in runs:
            await _unstick(client, *run)
        return freed


async def _free(client: Client, folder: Path, runs: set[tuple[str, str]]) -> tuple[bool, int]:
    """Fail the attempts noted in a dead process's folder: (all settled, how many freed).

    The runs of those freed go into `runs`.
    """
    try:
        entries = list(folder.iterdir())
    except FileNotFoundError:  # it died before making it, or another worker removed it
        return True, 0
    except OSError:
        return False, 0
    settled, freed = True, 0
    for entry in entries:
        if entry.suffix:
            continue  # a sidecar, read with its attempt's entry
        try:
            token_bytes = base64.b64decode(entry.read_text(), validate=True)
        except (OSError, ValueError):
            continue  # half written when the process died: nothing to free
        outcome = await _fail(client, token_bytes, folder.name, _spent(entry))
        if outcome and len(run := _run(entry)) == 2:
            runs.add((run[0], run[1]))
        freed += outcome is True
        settled = settled and outcome is not None
    return settled, freed


def _remove(entry: Path) -> None:
    """Forget an attempt and its sidecars."""
    with contextlib.suppress(OSError):  # a disk gone read-only raises EROFS here
        entry.unlink(missing_ok=True)
        entry.with_suffix(RUN).unlink(missing_ok=True)
        entry.with_suffix(SPENT).unlink(missing_ok=True)


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
