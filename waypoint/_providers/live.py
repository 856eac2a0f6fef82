"""Claude's words as they are generated, published outside the run's recorded history.

Providers call `emit(kind, text)` as the API streams and never know where it goes. The model
activity keeps the words of its attempt and looks, while it runs, for its step's `LiveStream`
(`waypoint._workflows.live`), which a reader starts when it sees the step open (a step nobody
watches starts nothing and writes nothing). Once found, everything so far goes out, then
batches (`BATCH`) of signals to that stream workflow, so a step's words cost its own short
history, not the run's. The step that answers closes its stream, one a reader started and
left between two looks included, so no stream outlives its step for want of a reader.
Publishing is best effort: a failure to stream never fails the step.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from contextvars import ContextVar, Token
from datetime import timedelta
from typing import Any, Literal

from temporalio import activity
from temporalio.client import WorkflowExecutionStatus, WorkflowHandle
from temporalio.contrib.workflow_streams import WorkflowStreamClient
from temporalio.service import RPCError

from waypoint._workflows.live import CLOSE
from waypoint.protocol.events import DELTAS_TOPIC, StepStarted, TextDelta, delta_stream_id

BATCH = timedelta(milliseconds=50)
"""The least time between two signals of deltas: latency against the stream's history size."""
FIRST_LOOK = 0.05
"""Seconds before the first look for a reader: a step that answers sooner looks once, at its
end (`_Sink.last_look`)."""
LOOK_EVERY = (0.2, 1.0)
"""Seconds between looks for a reader: often in a step's first `LOOKS_OFTEN_FOR` s, then less."""
LOOKS_OFTEN_FOR = 2.0

logger = logging.getLogger(__name__)


class _Sink:
    """Keeps an attempt's deltas; once a reader has opened the stream, sends them in batches.

    Not `async with WorkflowStreamClient`: its flusher waits in `asyncio.wait_for`, which on
    Python 3.11 swallows a cancel that lands as a forced flush wakes it, and the activity hangs
    until its heartbeat times out. This one sends at once when idle (the first token goes out
    within a round trip) and at most every `BATCH` while busy.
    """

    def __init__(
        self,
        publisher: WorkflowStreamClient,
        stream: WorkflowHandle[Any, Any],
        step_id: str,
        attempt: int,
    ) -> None:
        self.publisher = publisher
        self.stream = stream
        self.topic = publisher.topic(DELTAS_TOPIC)
        self.step_id = step_id
        self.attempt = attempt
        self.seq = 0
        self.read = False
        """A reader opened the step's stream: what was kept has gone out, the rest follows."""
        self.ready = asyncio.Event()
        self.task = asyncio.create_task(self._flusher())

    def put(self, kind: Literal["text", "thinking"], text: str, final: bool = False) -> None:
        self.seq += 1
        delta = TextDelta(
            step_id=self.step_id,
            attempt=self.attempt,
            kind=kind,
            text=text,
            seq=self.seq,
            final=final,
        )
        self.topic.publish(delta)
        self.ready.set()

    async def _reader_came(self) -> None:
        """Look for the step's stream until a reader has started it."""
        waited, pause = 0.0, FIRST_LOOK
        while True:
            await asyncio.sleep(pause)
            waited += pause
            try:
                about = await self.stream.describe()
                if about.status == WorkflowExecutionStatus.RUNNING:
                    return
            except RPCError:
                pass  # not started: nobody reads this step yet
            pause = LOOK_EVERY[0] if waited < LOOKS_OFTEN_FOR else LOOK_EVERY[1]

    async def _flusher(self) -> None:
        await self._reader_came()
        self.read = True
        while True:
            await self.ready.wait()
            self.ready.clear()
            try:
                await self.publisher.flush()
            except Exception as err:  # noqa: BLE001 - retried with the next batch
                logger.debug("live flush failed: %s", err)
            await asyncio.sleep(BATCH.total_seconds())

    async def last_look(self) -> bool:
        """Whether a reader started the stream since the last look; if so, it gets it all.

        A reader that came between two looks and has left again would otherwise leave the
        stream to its `LIFETIME`: the step ends now, so it is closed now.
        """
        try:
            if (await self.stream.describe()).status != WorkflowExecutionStatus.RUNNING:
                return False
        except RPCError:
            return False  # nobody started it: the usual case, one describe
        await self.publisher.flush()
        return True

    async def close(self) -> bool:
        """Stop the flusher and send what is left; False if nobody was reading."""
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task
        if self.read:
            await self.publisher.flush()
        return self.read


_sink: ContextVar[_Sink | None] = ContextVar("waypoint_live_sink", default=None)


def emit(kind: Literal["text", "thinking"], text: str) -> None:
    """Send a piece of the answer to whoever watches; a no-op outside a streaming step."""
    sink = _sink.get()
    if sink is not None and text:
        sink.put(kind, text)


@contextlib.asynccontextmanager
async def live_step(step_id: str) -> AsyncIterator[None]:
    """Keep this model activity's deltas while the body runs; stream them once a reader looks."""
    info = activity.info()
    try:
        client = activity.client()
    except RuntimeError:  # an activity run without a client (a unit test's): nobody can read
        yield
        return
    stream_id = delta_stream_id(info.workflow_id or "", step_id)
    publisher = WorkflowStreamClient.create(client, stream_id)
    publisher.topic(DELTAS_TOPIC).publish(StepStarted(step_id=step_id, attempt=info.attempt))
    sink = _Sink(publisher, client.get_workflow_handle(stream_id), step_id, info.attempt)
    token = _sink.set(sink)
    try:
        yield
    except BaseException:
        # A retry keeps the stream open; a step the run cancelled (a steer) is not retried.
        why = activity.cancellation_details()
        await _finish(sink, token, ended=why is not None and why.cancel_requested)
        raise
    await _finish(sink, token, ended=True)


async def _finish(sink: _Sink, token: Token[_Sink | None], ended: bool) -> None:
    """Mark the attempt's end; once the step has answered, close the stream (a retry keeps it)."""
    _sink.reset(token)
    sink.put("text", "", final=True)
    try:
        read = await sink.close()
        if ended and (read or await sink.last_look()):
            await sink.stream.signal(CLOSE)
    except Exception as err:  # noqa: BLE001 - the answer stands without its live copy
        logger.warning("live stream for %s not closed: %s", sink.step_id, err)
