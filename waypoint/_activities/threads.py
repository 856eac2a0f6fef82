"""An effect's attempt reports only once every thread it started has returned.

A coroutine can be cancelled; a thread cannot. An `async def` effect that awaits
`asyncio.to_thread(bank.pay, ...)` and is stopped (its timeout, the run's cancel, the worker's
drain) leaves the thread running: a retry whose reconcile looks before that thread's write lands
finds nothing and pays again. So the worker's default executor counts the threads each effect
attempt starts (`asyncio.to_thread` and `loop.run_in_executor(None, ...)` submit there, in the
attempt's context), and the attempt waits for them, heartbeating, before it says anything.
A thread started with `threading.Thread` is not seen; a dead worker takes its threads with it.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import threading
import weakref
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import asynccontextmanager
from typing import Any

from temporalio import activity

from waypoint._activities.heartbeat import heartbeating

logger = logging.getLogger(__name__)

_attempt: contextvars.ContextVar[AttemptThreads | None] = contextvars.ContextVar(
    "waypoint_attempt_threads", default=None
)
_installed: weakref.WeakSet[asyncio.AbstractEventLoop] = weakref.WeakSet()
_by_key: dict[str, AttemptThreads] = {}
"""Effect attempts on this worker whose threads still run, by effect key."""


class AttemptThreads:
    """How many threads one attempt has running; `idle` is set when none is."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.idle = asyncio.Event()
        self.idle.set()
        self._lock = threading.Lock()
        self._running = 0

    @property
    def running(self) -> int:
        """Threads of this attempt that have not returned."""
        with self._lock:
            return self._running

    def started(self) -> None:
        """A thread was submitted (from any thread)."""
        with self._lock:
            self._running += 1
        self._signal()

    def ended(self, _: Future[Any] | None = None) -> None:
        """A thread returned (called from it, as its future's done callback)."""
        with self._lock:
            self._running -= 1
        self._signal()

    def _signal(self) -> None:
        try:
            self.loop.call_soon_threadsafe(self._update)
        except RuntimeError:  # the loop is closed: nobody waits any more
            pass

    def _update(self) -> None:
        if self.running:
            self.idle.clear()
        else:
            self.idle.set()


class CountingExecutor(ThreadPoolExecutor):
    """The default executor, counting the threads an effect attempt submits."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        """Submit `fn`, counted against the effect attempt whose context submits it."""
        threads = _attempt.get()
        if threads is None:
            return super().submit(fn, *args, **kwargs)
        threads.started()
        try:
            future = super().submit(fn, *args, **kwargs)
        except BaseException:
            threads.ended()
            raise
        future.add_done_callback(threads.ended)
        return future


def install(loop: asyncio.AbstractEventLoop) -> None:
    """Make the loop's default executor count threads (once per loop)."""
    if loop not in _installed:
        loop.set_default_executor(CountingExecutor(thread_name_prefix="waypoint-tool"))
        _installed.add(loop)


@asynccontextmanager
async def settled(tool: str, step_id: str, effect_key: str) -> AsyncIterator[AttemptThreads]:
    """Run an effect attempt's body inside; on the way out, outwait the threads it started.

    An earlier attempt of the same effect whose threads still run on this worker (the server
    gave up on it) is waited for first, so two attempts never overlap here either.
    """
    loop = asyncio.get_running_loop()
    install(loop)
    earlier = _by_key.get(effect_key)
    if earlier is not None and earlier.running:
        logger.warning(
            "%s (%s): an earlier attempt's thread still runs on this worker; waiting for it "
            "before this attempt looks the effect up",
            tool,
            step_id,
        )
        await _outwait(earlier, tool)
    threads = AttemptThreads(loop)
    token = _attempt.set(threads)
    try:
        yield threads
    finally:
        _attempt.reset(token)
        if threads.running:
            _by_key[effect_key] = threads
            logger.warning(
                "%s (%s) stopped while %d thread(s) it started still run; a thread cannot be "
                "stopped, so the attempt waits for it, heartbeating, and reports only after it "
                "returned (the effect is then looked up by its key)",
                tool,
                step_id,
                threads.running,
            )
            try:
                await _outwait(threads, tool)
            finally:
                if _by_key.get(effect_key) is threads:
                    del _by_key[effect_key]
            logger.info("%s (%s): its thread(s) returned", tool, step_id)


async def _outwait(threads: AttemptThreads, tool: str) -> None:
    """Wait for the threads to return, heartbeating; a cancel meanwhile waits too."""
    waiting = asyncio.ensure_future(heartbeating(threads.idle.wait(), tool))
    cancelled = False
    while not waiting.done():
        try:
            await asyncio.shield(waiting)
        except asyncio.CancelledError:
            cancelled = True  # what the attempt reports waits until its threads returned
    if cancelled and activity.in_activity():
        activity.logger.info("%s: a cancel arrived while its thread ran; it ran to its end", tool)
