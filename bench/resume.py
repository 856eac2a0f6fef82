"""Resume latency: park runs at 10 / 100 / 1,000 steps, replace the worker, raise the limit.

A run with `Limits(max_turns=K)` parks after K turns (2K + 1 steps: the spec, then a model and a
tool step per turn). The worker subprocess is stopped (SIGTERM) or killed (SIGKILL), a fresh one
starts with an empty cache, and `raise_limits` lets the run take one more turn: the latency is
from the signal to the next activity starting, both read from the server's event times, so the
new worker must replay the history segment before it can schedule anything.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from bench import history
from bench.harness import Env, new_id
from bench.stats import Spread, table
from bench.worker_proc import WorkerProcess
from waypoint.client import runs
from waypoint.protocol import Limits
from waypoint.protocol import search_attributes as sa

QUEUE = "resume"
E = history.E


@dataclass
class Resume:
    """Latencies by completed steps: after a graceful stop and after a SIGKILL."""

    stopped: dict[int, list[float]] = field(default_factory=dict)
    killed: dict[int, list[float]] = field(default_factory=dict)
    replay: dict[int, list[float]] = field(default_factory=dict)
    events: dict[int, list[int]] = field(default_factory=dict)

    def report(self) -> str:
        """The resume table."""
        rows = [
            [
                f"{steps:,}",
                Spread.of(self.events[steps]).show("{:,.0f}"),
                Spread.of(self.stopped[steps]).show("{:,.0f}"),
                Spread.of(self.replay[steps]).show("{:,.0f}"),
                Spread.of(self.killed[steps]).show("{:,.0f}"),
            ]
            for steps in self.stopped
        ]
        head = "**Resume latency**: signal to next step started, new worker with an empty cache"
        headers = [
            "completed steps",
            "events replayed",
            "ms after SIGTERM",
            "of which replay task ms",
            "ms after SIGKILL, signalled at once",
        ]
        return "\n".join([head, "", table(headers, rows)])


async def _turn_and_state(env: Env, workflow_id: str) -> tuple[int | None, str | None]:
    found = await env.client.get_workflow_handle(workflow_id).describe()
    attrs = found.typed_search_attributes
    return attrs.get(sa.TURNS), attrs.get(sa.STATUS)


async def _parked(env: Env, workflow_id: str, turn: int, timeout: float = 600) -> None:
    async with asyncio.timeout(timeout):
        while await _turn_and_state(env, workflow_id) != (turn, "limit_reached"):
            await asyncio.sleep(0.1)


def _latency(events: list) -> tuple[float, float, int]:
    """(signal -> next activity started ms, replay workflow task ms, events before the signal)."""
    i = max(
        k
        for k, ev in enumerate(events)
        if ev.event_type == E.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
    )
    after = events[i:]
    started = next(ev for ev in after if ev.event_type == E.EVENT_TYPE_ACTIVITY_TASK_STARTED)
    task = next(ev for ev in after if ev.event_type == E.EVENT_TYPE_WORKFLOW_TASK_COMPLETED)
    task_started = next(
        ev
        for ev in reversed(after[: after.index(task)])
        if ev.event_type == E.EVENT_TYPE_WORKFLOW_TASK_STARTED
    )
    return history.elapsed_ms(events[i], started), history.elapsed_ms(task_started, task), i


async def _advance(env: Env, workflow_id: str, turn: int) -> tuple[float, float, int]:
    """Raise the limit by one turn, wait until the run parks again, and read the latency."""
    handle = env.client.get_workflow_handle(workflow_id)
    await handle.signal("raise_limits", Limits(max_turns=turn + 1))
    await _parked(env, workflow_id, turn + 1)
    return _latency(await history.fetch(env.client, workflow_id))


async def resume(env: Env, sizes: list[int], reps: int) -> Resume:
    """Park one run per size, then per repetition: stop-and-replace, then kill-and-replace."""
    result = Resume()
    stores = env.work / "resume"
    worker = WorkerProcess(env.server.address, QUEUE, stores)
    try:
        await worker.ready(env.client)
        turns = {steps: steps // 2 for steps in sizes}
        ids = {steps: new_id(f"resume-{steps}") for steps in sizes}
        for steps in sizes:
            await runs.start_run(
                env.client,
                "resume",
                "benchmark",
                task_queue=QUEUE,
                workflow_id=ids[steps],
                limits=Limits(max_turns=turns[steps]),
            )
        for steps in sizes:
            await _parked(env, ids[steps], turns[steps])
        for _ in range(reps):
            worker.stop()
            worker = WorkerProcess(env.server.address, QUEUE, stores)
            await worker.ready(env.client)
            for steps in sizes:
                total, replay, events = await _advance(env, ids[steps], turns[steps])
                turns[steps] += 1
                result.stopped.setdefault(steps, []).append(total)
                result.replay.setdefault(steps, []).append(replay)
                result.events.setdefault(steps, []).append(events)
            worker.kill()
            worker = WorkerProcess(env.server.address, QUEUE, stores)
            await worker.ready(env.client)
            done = await asyncio.gather(*(_advance(env, ids[s], turns[s]) for s in sizes))
            for steps, (total, _, _) in zip(sizes, done, strict=True):
                turns[steps] += 1
                result.killed.setdefault(steps, []).append(total)
    finally:
        worker.stop()
    return result
