"""Read a run's events: from what the run records, never by writing to it.

`events(client, run, from_offset)` yields typed events (`waypoint.protocol.events`):
- Lifecycle events come from the run's stream by query, which adds nothing to its history (a
  long-poll Update, the stream's own way of following, records every poll in it). A reader
  asks `describe()` (no worker needed) whether the run's history grew, and queries only then:
  a waiting run costs its readers a describe each `IDLE_POLL`, and the run nothing.
  Each event has its `offset`; pass `last.offset + 1` to resume with no gap and no duplicate.
- Claude's words come from each model step's own `LiveStreamWorkflow`, whose history is its
  own: a reader that sees a model step open starts that stream (one per step, whoever comes
  first), and the model activity, which looks for it while it runs, publishes into it from its
  first word. Every `TextDelta` of a step comes before that step's `StepCompleted`; nobody
  watching, nothing is started.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowQueryFailedError,
)
from temporalio.common import RawValue, WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.contrib.workflow_streams import PollInput, PollResult, WorkflowStreamClient
from temporalio.contrib.workflow_streams._types import _decode_payload
from temporalio.service import RPCError, RPCStatusCode

from waypoint._workflows.live import CLOSE, LIFETIME, LiveStreamWorkflow
from waypoint.protocol.events import (
    DELTAS_TOPIC,
    EVENTS_TOPIC,
    RunEnded,
    RunEvent,
    StateChanged,
    StepCompleted,
    StepFailed,
    StepScheduled,
    StepStarted,
    TextDelta,
    delta_stream_id,
    run_event,
)

POLL = "__temporal_workflow_stream_poll"
COOLDOWN = timedelta(milliseconds=10)
"""Pause between long polls of a step's live stream (its polls cost its own history only)."""
BUSY_POLL = 0.1
"""Seconds between two looks at a run whose history just grew."""
MOVING_POLL = 0.25
"""The longest pause between two looks at a run that is not parked (a step may be open)."""
IDLE_POLL = 1.0
"""The longest pause between two looks at a parked run: it waits for a person or a command."""
QUERY_TIMEOUT = timedelta(seconds=10)
DRAIN = 5.0
"""Seconds a finished step waits for its last deltas before `StepCompleted` goes out anyway."""
OPEN = (WorkflowExecutionStatus.RUNNING, WorkflowExecutionStatus.CONTINUED_AS_NEW)


def _event(raw: bytes, offset: int | None) -> RunEvent:
    event = run_event.validate_json(raw)
    return event.model_copy(update={"offset": offset}) if offset is not None else event


async def events(
    client: Client, run: str, from_offset: int = 0, *, live: bool = True
) -> AsyncIterator[RunEvent]:
    """The run's events from `from_offset`, then as they happen, until the run ends.

    Args:
        client: A connected client.
        run: The run's workflow id.
        from_offset: The offset to start at (`event.offset + 1` resumes after `event`).
        live: Also read Claude's words (`StepStarted`, `TextDelta`) as they are generated.
    """
    out: asyncio.Queue[RunEvent | None] = asyncio.Queue()
    pump = asyncio.create_task(_Pump(client, run, out, live).run(from_offset))
    try:
        while True:
            item = await out.get()
            if item is None:
                break
            yield item
        await pump  # surface the pump's error, if it stopped on one
    finally:
        pump.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await pump


class _Pump:
    """Moves lifecycle events and the deltas of open model steps into one ordered queue."""

    def __init__(
        self, client: Client, run: str, out: asyncio.Queue[RunEvent | None], live: bool
    ) -> None:
        self.client = client
        self.run_id = run
        self.out = out
        self.live = live
        self.readers: dict[str, _StepReader] = {}
        self.open_steps: list[str] = []
        self.task_queue = ""
        self.parked = False

    async def run(self, offset: int) -> None:
        try:
            await self._follow(offset)
            for reader in self.readers.values():  # the run ended: its open steps never will
                await reader.close()
        finally:
            for reader in self.readers.values():
                reader.task.cancel()
            await self.out.put(None)

    async def _follow(self, offset: int) -> None:
        """Look at the run's history length; read the stream by query when it has grown."""
        handle = self.client.get_workflow_handle(self.run_id)
        seen: tuple[str, int] | None = None
        pause = BUSY_POLL
        while True:
            about = await handle.describe()
            self.task_queue = about.task_queue
            now = (about.run_id or "", about.history_length)
            if now != seen:
                at = self.client.get_workflow_handle(self.run_id, run_id=about.run_id)
                read = await self._read(at, offset)
                if read is None:  # no worker answered yet: look again
                    await asyncio.sleep(pause)
                    pause = min(IDLE_POLL, pause * 2)
                    continue
                if read < 0:
                    return
                offset, seen, pause = read, now, BUSY_POLL
            elif about.status not in OPEN:
                return  # it ended without saying so (failed, cancelled, terminated): all read
            else:
                pause = min(IDLE_POLL if self.parked else MOVING_POLL, pause * 2)
            await asyncio.sleep(pause)

    async def _read(self, handle: WorkflowHandle[Any, Any], offset: int) -> int | None:
        """Everything the stream holds from `offset`.

        Returns the next offset, -1 once the run has ended, None if no worker answered.
        """
        while True:
            try:
                result: PollResult = await handle.query(
                    POLL,
                    PollInput(topics=[EVENTS_TOPIC], from_offset=offset),
                    result_type=PollResult,
                    rpc_timeout=QUERY_TIMEOUT,
                )
            except (RPCError, WorkflowQueryFailedError):
                return None  # no first workflow task yet, or no worker: look again
            for item in result.items:
                event = _event(_decode_payload(item.data).data, item.offset)
                await self._pass(event)
                if isinstance(event, RunEnded):
                    return -1
            offset = result.next_offset
            if not result.more_ready:
                break
        for step_id in self.open_steps:  # still open once caught up: read its words
            self._open(step_id)
        return offset

    async def _pass(self, event: RunEvent) -> None:
        if isinstance(event, StateChanged):
            self.parked = event.parked
        if isinstance(event, StepScheduled) and event.kind == "model":
            self.open_steps.append(event.step_id)
        elif isinstance(event, StepCompleted | StepFailed):
            with contextlib.suppress(ValueError):
                self.open_steps.remove(event.step_id)
            await self._close(event)
        await self.out.put(event)

    def _open(self, step_id: str) -> None:
        if self.live and step_id not in self.readers:
            reader = _StepReader(self.client, self.run_id, step_id, self.task_queue, self.out)
            self.readers[step_id] = reader

    async def _close(self, event: StepCompleted | StepFailed) -> None:
        reader = self.readers.pop(event.step_id, None)
        if reader is None:
            return
        attempt = event.attempt if isinstance(event, StepCompleted) else None
        if attempt is not None and await reader.streamed(attempt):
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(reader.finished(attempt), DRAIN)
        reader.task.cancel()
        await reader.close()


class _StepReader:
    """Opens one model step's live stream and reads it into the queue, from its first delta."""

    def __init__(
        self,
        client: Client,
        run: str,
        step_id: str,
        task_queue: str,
        out: asyncio.Queue[RunEvent | None],
    ) -> None:
        self.client = client
        self.stream_id = delta_stream_id(run, step_id)
        self.task_queue = task_queue
        self.out = out
        self.done: set[int] = set()
        self.changed = asyncio.Event()
        self.task = asyncio.create_task(self._read())

    async def streamed(self, attempt: int) -> bool:
        """Whether `attempt` published anything: not if it ended before it found the stream."""
        if attempt in self.done:
            return True
        handle = self.client.get_workflow_handle(self.stream_id)
        try:
            result: PollResult = await handle.query(
                POLL, PollInput(topics=[DELTAS_TOPIC]), result_type=PollResult
            )
        except (RPCError, WorkflowQueryFailedError):
            return False
        for item in result.items:
            event = _event(_decode_payload(item.data).data, None)
            if isinstance(event, StepStarted) and event.attempt == attempt:
                return True
        return False

    async def finished(self, attempt: int) -> None:
        """Wait until `attempt`'s last delta has been queued (or the stream ended)."""
        while attempt not in self.done and not self.task.done():
            self.changed.clear()
            await self.changed.wait()

    async def close(self) -> None:
        """End the stream if its step never found it (the activity closes the ones it used)."""
        with contextlib.suppress(RPCError):
            await self.client.get_workflow_handle(self.stream_id).signal(CLOSE)

    async def _start(self) -> None:
        await self.client.start_workflow(
            LiveStreamWorkflow.run,
            id=self.stream_id,
            task_queue=self.task_queue,
            execution_timeout=LIFETIME,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
        )

    async def _read(self) -> None:
        backoff = 0.02
        offset = 0
        try:
            await self._start()
            while True:
                stream = WorkflowStreamClient.create(self.client, self.stream_id)
                try:
                    async for item in stream.subscribe(
                        [DELTAS_TOPIC],
                        from_offset=offset,
                        result_type=RawValue,
                        poll_cooldown=COOLDOWN,
                    ):
                        offset = item.offset + 1
                        event = _event(item.data.payload.data, None)
                        if isinstance(event, TextDelta | StepStarted):
                            await self.out.put(event)
                        if isinstance(event, TextDelta) and event.final:
                            self.done.add(event.attempt)
                            self.changed.set()
                    return
                except RPCError as err:
                    if err.status != RPCStatusCode.NOT_FOUND:
                        raise
                await asyncio.sleep(backoff)  # started a moment ago: its first task is coming
                backoff = min(0.5, backoff * 2)
        finally:
            self.changed.set()


def json_line(event: RunEvent) -> str:
    """One line of JSON for `--json`: the event, with its offset when it has one."""
    data: dict[str, Any] = event.model_dump(mode="json")
    if event.offset is not None:
        data["offset"] = event.offset
    return json.dumps(data, separators=(",", ":"))
