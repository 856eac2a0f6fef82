"""Read a run's events: the recorded past by query, then live, with Claude's words merged in.

`events(client, run, from_offset)` yields typed events (`waypoint.protocol.events`):
- The past comes from the run's stream by query, which adds nothing to the run's history
  (a long-poll Update would record the whole backlog in it).
- Then it long-polls the stream for new lifecycle events, each with its `offset`; pass
  `last.offset + 1` to resume after a disconnect with no gap and no duplicate.
- While a model step runs, its live stream (`LiveStreamWorkflow`) is read alongside: every
  `TextDelta` of a step comes before that step's `StepCompleted`. A step in progress when the
  reader (re)connects is read from its first delta, so its text is whole.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

from temporalio.client import Client, WorkflowQueryFailedError
from temporalio.common import RawValue
from temporalio.contrib.workflow_streams import (
    PollInput,
    PollResult,
    WorkflowStreamClient,
)
from temporalio.contrib.workflow_streams._types import _decode_payload
from temporalio.service import RPCError, RPCStatusCode

from waypoint.protocol import WatchRequest
from waypoint.protocol.events import (
    DELTAS_TOPIC,
    EVENTS_TOPIC,
    RunEnded,
    RunEvent,
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
"""Pause between long polls once caught up (a live stream's polls cost its own history only)."""
RUN_COOLDOWN = timedelta(milliseconds=100)
"""The same for the run's stream, whose polls are recorded in the run's history."""
DRAIN = 5.0
"""Seconds a finished step waits for its last deltas before `StepCompleted` goes out anyway."""


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


LEASE_SECONDS = 600
"""How long one `watch` signal keeps a run streaming; a reader renews it at half time."""


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

    async def run(self, offset: int) -> None:
        lease = asyncio.create_task(self._hold_lease()) if self.live else None
        try:
            offset = await self._catch_up(offset)
            await self._follow(offset)
        finally:
            if lease is not None:
                lease.cancel()
            for reader in self.readers.values():
                reader.task.cancel()
            await self.out.put(None)

    async def _hold_lease(self) -> None:
        """Tell the run someone is watching, and keep saying so: unwatched, words cost nothing.

        Model steps scheduled while the lease holds stream their words; a step already running
        when the reader arrives shows its text when it completes.
        """
        handle = self.client.get_workflow_handle(self.run_id)
        while True:
            with contextlib.suppress(RPCError):  # a closed run: nothing left to stream
                await handle.signal("watch", WatchRequest(seconds=LEASE_SECONDS))
            await asyncio.sleep(LEASE_SECONDS / 2)

    async def _catch_up(self, offset: int) -> int:
        """The past, by query; then open readers for model steps still running."""
        handle = self.client.get_workflow_handle(self.run_id)
        open_steps: list[str] = []
        while True:
            try:
                result: PollResult = await handle.query(
                    POLL,
                    PollInput(topics=[EVENTS_TOPIC], from_offset=offset),
                    result_type=PollResult,
                )
            except (RPCError, WorkflowQueryFailedError):
                return offset  # no first workflow task yet: the long poll will catch up
            for item in result.items:
                event = _event(_decode_payload(item.data).data, item.offset)
                if isinstance(event, StepScheduled) and event.kind == "model":
                    open_steps.append(event.step_id)
                elif isinstance(event, StepCompleted | StepFailed):
                    with contextlib.suppress(ValueError):
                        open_steps.remove(event.step_id)
                await self.out.put(event)
                if isinstance(event, RunEnded):
                    return -1
            offset = result.next_offset
            if not result.more_ready:
                break
        for step_id in open_steps:
            self._open(step_id)
        return offset

    async def _follow(self, offset: int) -> None:
        if offset < 0:
            return
        stream = WorkflowStreamClient.create(self.client, self.run_id)
        async for item in stream.subscribe(
            [EVENTS_TOPIC], from_offset=offset, result_type=RawValue, poll_cooldown=RUN_COOLDOWN
        ):
            event = _event(item.data.payload.data, item.offset)
            if isinstance(event, StepScheduled) and event.kind == "model":
                self._open(event.step_id)
            elif isinstance(event, StepCompleted | StepFailed):
                await self._close(event)
            await self.out.put(event)
            if isinstance(event, RunEnded):
                return

    def _open(self, step_id: str) -> None:
        if self.live and step_id not in self.readers:
            self.readers[step_id] = _StepReader(self.client, self.run_id, step_id, self.out)

    async def _close(self, event: StepCompleted | StepFailed) -> None:
        reader = self.readers.pop(event.step_id, None)
        if reader is None:
            return
        attempt = event.attempt if isinstance(event, StepCompleted) else None
        if attempt is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(reader.finished(attempt), DRAIN)
        reader.task.cancel()


class _StepReader:
    """Reads one model step's live stream into the queue, from its first delta."""

    def __init__(
        self, client: Client, run: str, step_id: str, out: asyncio.Queue[RunEvent | None]
    ) -> None:
        self.client = client
        self.stream_id = delta_stream_id(run, step_id)
        self.out = out
        self.done: set[int] = set()
        self.changed = asyncio.Event()
        self.task = asyncio.create_task(self._read())

    async def finished(self, attempt: int) -> None:
        """Wait until `attempt`'s last delta has been queued (or the stream ended)."""
        while attempt not in self.done and not self.task.done():
            self.changed.clear()
            await self.changed.wait()

    async def _read(self) -> None:
        backoff = 0.02
        offset = 0
        try:
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
                # The activity has not opened the stream yet: it will within moments.
                await asyncio.sleep(backoff)
                backoff = min(0.5, backoff * 2)
        finally:
            self.changed.set()


def json_line(event: RunEvent) -> str:
    """One line of JSON for `--json`: the event, with its offset when it has one."""
    data: dict[str, Any] = event.model_dump(mode="json")
    if event.offset is not None:
        data["offset"] = event.offset
    return json.dumps(data, separators=(",", ":"))
