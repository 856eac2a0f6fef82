"""A run's events as Server-Sent Events, from the stream `waypoint watch` reads.

Each lifecycle event goes out with its stream offset as the SSE `id`, so a browser that
reconnects sends `Last-Event-ID` and carries on with no gap and no repeat; Claude's words
(`text_delta`) carry no id, and a step still streaming is read again from its first word. A
reader too slow to take an event within `SEND_TIMEOUT` is dropped (its reconnect catches
up), so one stalled tab holds nothing for long. The stream ends with an `end` event when the
run ends, or an `error` event saying why it cannot go on.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator

from sse_starlette import EventSourceResponse, ServerSentEvent
from temporalio.client import Client

from waypoint.client.events import events, json_line

logger = logging.getLogger(__name__)
PING_SECONDS = 15
SEND_TIMEOUT = 30.0


async def _frames(client: Client, run: str, offset: int) -> AsyncIterator[ServerSentEvent]:
    try:
        async for event in events(client, run, offset):
            yield ServerSentEvent(
                data=json_line(event),
                event=event.type,
                id=str(event.offset) if event.offset is not None else None,
            )
    except Exception as err:  # noqa: BLE001 - the reader hears why, then reconnects or not
        logger.warning("event stream of %s stopped: %s", run, err)
        why = json.dumps({"detail": f"the event stream stopped: {type(err).__name__}"})
        yield ServerSentEvent(data=why, event="error")
        return
    yield ServerSentEvent(data="{}", event="end")


def event_stream(client: Client, run: str, offset: int) -> EventSourceResponse:
    """The SSE response for `run` from `offset`."""
    return EventSourceResponse(
        _frames(client, run, offset),
        ping=PING_SECONDS,
        send_timeout=SEND_TIMEOUT,
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )
