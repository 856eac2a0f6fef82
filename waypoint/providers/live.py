"""Claude's words as they are generated, published outside the run's recorded history.

The model activity opens a `LiveStream` for its step (`waypoint.workflows.live`); providers
call `emit(kind, text)` as the API streams and never know where it goes. Deltas are batched
(`BATCH`) into signals to that stream workflow, so a step's words cost its own short history,
not the run's. Publishing is best effort: a failure to stream never fails the model step.
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
from temporalio.client import Client, WorkflowHandle
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.contrib.workflow_streams import WorkflowStreamClient

from waypoint.protocol.events import DELTAS_TOPIC, StepStarted, TextDelta, delta_stream_id
from waypoint.workflows.live import CLOSE, LiveStreamWorkflow

BATCH = timedelta(milliseconds=50)
"""The least time between two signals of deltas: latency against the stream's history size."""
LIFETIME = timedelta(hours=2)
"""A stream whose step never answered (a worker lost for good) ends on its own."""

logger = logging.getLogger(__name__)


class _Sink:
    """Buffers deltas and sends them in batches, from a flusher of its own.

    Not `async with WorkflowStreamClient`: its flusher waits in `asyncio.wait_for`, which on
    Python 3.11 swallows a cancel that lands as a forced flush wakes it, and the activity hangs
    until its heartbeat times out. This one sends at once when idle (the first token goes out
    within a round trip) and at most every `BATCH` while busy.
    """

    def __init__(self, publisher: WorkflowStreamClient, step_id: str, attempt: int) -> None:
        self.publisher = publisher
        self.topic = publisher.topic(DELTAS_TOPIC)
        self.step_id = step_id
        self.attempt = attempt
        self.seq = 0
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

    async def _flusher(self) -> None:
        while True:
            await self.ready.wait()
            self.ready.clear()
            try:
                await self.publisher.flush()
            except Exception as err:  # noqa: BLE001 - retried with the next batch
                logger.debug("live flush failed: %s", err)
            await asyncio.sleep(BATCH.total_seconds())

    async def close(self) -> None:
        """Stop the flusher and send what is left."""
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task
        await self.publisher.flush()


_sink: ContextVar[_Sink | None] = ContextVar("waypoint_live_sink", default=None)


def emit(kind: Literal["text", "thinking"], text: str) -> None:
    """Send a piece of the answer to whoever watches; a no-op outside a streaming step."""
    sink = _sink.get()
    if sink is not None and text:
        sink.put(kind, text)


@contextlib.asynccontextmanager
async def live_step(step_id: str, task_queue: str | None = None) -> AsyncIterator[None]:
    """Stream this model activity's deltas to its step's `LiveStream` while the body runs.

    The stream runs on `task_queue`, by default this activity's: one where workflows are run.
    """
    info = activity.info()
    client = activity.client()
    stream_id = delta_stream_id(info.workflow_id or "", step_id)
    try:
        await _open(client, stream_id, task_queue or info.task_queue)
    except Exception as err:  # noqa: BLE001 - live text is a courtesy, the step is not
        logger.warning("no live stream for %s: %s", step_id, err)
        yield
        return
    publisher = WorkflowStreamClient.create(client, stream_id)
    publisher.topic(DELTAS_TOPIC).publish(StepStarted(step_id=step_id, attempt=info.attempt))
    sink = _Sink(publisher, step_id, info.attempt)
    sink.ready.set()
    token = _sink.set(sink)
    try:
        yield
    except BaseException:
        # A retry keeps the stream open; a step the run cancelled (a steer) is not retried.
        why = activity.cancellation_details()
        ended = why is not None and why.cancel_requested
        await _finish(sink, token, client.get_workflow_handle(stream_id) if ended else None)
        raise
    await _finish(sink, token, client.get_workflow_handle(stream_id))


async def _finish(
    sink: _Sink, token: Token[_Sink | None], done: WorkflowHandle[Any, Any] | None
) -> None:
    """Mark the attempt's end; on success, close the stream (a retry keeps it open)."""
    _sink.reset(token)
    sink.put("text", "", final=True)
    try:
        await sink.close()
        if done is not None:
            await done.signal(CLOSE)
    except Exception as err:  # noqa: BLE001 - the answer stands without its live copy
        logger.warning("live stream for %s not closed: %s", sink.step_id, err)


async def _open(client: Client, stream_id: str, task_queue: str) -> None:
    await client.start_workflow(
        LiveStreamWorkflow.run,
        id=stream_id,
        task_queue=task_queue,
        execution_timeout=LIFETIME,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
    )
