"""Tool activities heartbeat on their own, and a tool that blocks the event loop is named.

A heartbeat every second lets Temporal notice a killed worker within the heartbeat timeout
(seconds) instead of the start-to-close timeout (minutes). The same ticker measures how late it
wakes: a late wake-up means some coroutine held the event loop, which freezes every run on the
worker, so the tools running at that moment are named in the log.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections import Counter
from collections.abc import Awaitable
from typing import TypeVar

from temporalio import activity

T = TypeVar("T")

TICK = 1.0
"""Seconds between heartbeats (the SDK throttles what it sends to the server)."""
BLOCKED_AFTER = 1.0
"""A tick this much later than due means the event loop was blocked."""

logger = logging.getLogger(__name__)
_running: Counter[str] = Counter()


async def heartbeating(work: Awaitable[T], tool: str) -> T:
    """Await `work` while heartbeating; warn, naming the tools in flight, if the loop stalls."""
    if not activity.in_activity():
        return await work
    _running[tool] += 1
    ticker = _Ticker()
    task = asyncio.create_task(ticker.run())
    try:
        try:
            await asyncio.sleep(0)  # start the clock before the tool can block the loop
        except BaseException:
            if inspect.iscoroutine(work):
                work.close()  # cancelled before it began: not "never awaited" in the log
            raise
        return await work
    finally:
        task.cancel()
        ticker.check()  # a tool that blocked, then returned before the ticker woke
        _running[tool] -= 1
        if not _running[tool]:
            del _running[tool]


class _Ticker:
    """Heartbeats every `TICK`; a wake-up later than due means the event loop was blocked."""

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.due = self.loop.time() + TICK

    async def run(self) -> None:
        while True:
            await asyncio.sleep(max(0.0, self.due - self.loop.time()))
            self.check()
            activity.heartbeat()

    def check(self) -> None:
        now = self.loop.time()
        late = now - self.due
        if late > BLOCKED_AFTER:
            names = ", ".join(sorted(_running)) or "unknown"
            logger.warning(
                "the event loop was blocked for %.1fs while tools ran: %s. A tool doing "
                "blocking work in an `async def` freezes the whole worker; make it a plain "
                "`def` (Waypoint runs those in a thread) or await non-blocking I/O",
                late,
                names,
            )
        if now >= self.due:
            self.due = now + TICK
