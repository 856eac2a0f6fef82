"""A run's events as Server-Sent Events, from the stream `waypoint watch` reads.

Each lifecycle event goes out with its stream offset as the SSE `id`, so a browser that
reconnects sends `Last-Event-ID` and carries on with no gap and no repeat; Claude's words
(`text_delta`) carry no id, and a step still streaming is read again from its first word. A
reader too slow to take an event within `SEND_TIMEOUT` is dropped (its reconnect catches
up), so one stalled tab holds nothing for long. A reader whose role was taken away (or whose
session ended) is cut off within `RECHECK_SECONDS`, whether or not the run sends events. The
stream ends with an `end` event when the run ends, or an `error` event saying why it cannot go
on.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from sse_starlette import EventSourceResponse, ServerSentEvent
from temporalio.client import Client

from waypoint.client.events import events, json_line

logger = logging.getLogger(__name__)
PING_SECONDS = 15
SEND_TIMEOUT = 30.0
RECHECK_SECONDS = 5.0
"""How often an open stream asks again whether its reader may still read the run: a reader
whose role or session ended is cut within 10 s, events or none."""
Allowed = Callable[[], Awaitable[bool]]


async def _frames(
    client: Client, run: str, offset: int, still_allowed: Allowed, recheck: float
) -> AsyncIterator[ServerSentEvent]:
    source = events(client, run, offset).__aiter__()
    upcoming: asyncio.Future[Any] | None = None
    checked = time.monotonic()
    try:
        while True:
            upcoming = upcoming or asyncio.ensure_future(anext(source))
            left = recheck - (time.monotonic() - checked)
            done = left > 0 and (await asyncio.wait({upcoming}, timeout=left))[0]
            if not done:  # on a timer, not only on events: a waiting run sends none for days
                checked = time.monotonic()
                if not await still_allowed():
                    why = json.dumps({"detail": "you may no longer read this run"})
                    yield ServerSentEvent(data=why, event="error")
                    return
                continue
            try:
                event = upcoming.result()
            except StopAsyncIteration:
                break
            upcoming = None
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
    finally:
        if upcoming is not None:
            upcoming.cancel()  # closes the source: the cancellation runs through it
    yield ServerSentEvent(data="{}", event="end")


def event_stream(
    client: Client, run: str, offset: int, still_allowed: Allowed, recheck: float = RECHECK_SECONDS
) -> EventSourceResponse:
    """The SSE response for `run` from `offset`; `still_allowed` is asked every `recheck` s."""
    return EventSourceResponse(
        _frames(client, run, offset, still_allowed, recheck),
        ping=PING_SECONDS,
        send_timeout=SEND_TIMEOUT,
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )
