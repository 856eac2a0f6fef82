"""Parked runs: many runs waiting on approval, and what they cost the worker while they wait.

The worker is a `waypoint worker` subprocess, measured from /proc: resident memory after a few
finished warm-up runs, then with every run parked, and CPU over a quiet window while they wait.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from bench.agents import WARM_UP_STEPS, stepper_name
from bench.harness import Env, new_id
from bench.stats import table
from bench.worker_proc import WorkerProcess
from waypoint.client import runs
from waypoint.protocol.queues import agent_queue

WARM_UP_RUNS = 10
QUIET_SECONDS = 10.0
WAVE = 40
"""Runs started together; the next wave starts once they are all parked (below the small cache)."""


@dataclass
class ParkedRow:
    """One worker configuration with every run parked."""

    cache: str
    runs: int
    park_seconds: float
    baseline_rss: int
    parked_rss: int
    cpu_percent: float

    @property
    def added_mb(self) -> float:
        """Memory the parked runs added, in MB."""
        return (self.parked_rss - self.baseline_rss) / 1e6


@dataclass
class Parked:
    """Rows by cache configuration."""

    rows: list[ParkedRow] = field(default_factory=list)

    def report(self) -> str:
        """The parked-runs table."""
        body = [
            [
                r.cache,
                f"{r.runs:,}",
                f"{r.park_seconds:.0f}",
                f"{r.baseline_rss / 1e6:.0f}",
                f"{r.parked_rss / 1e6:.0f}",
                f"{r.added_mb:.0f}",
                f"{(r.parked_rss - r.baseline_rss) / 1024 / r.runs:.0f}",
                f"{r.cpu_percent:.1f}",
            ]
            for r in self.rows
        ]
        headers = [
            "worker cache",
            "parked runs",
            "s to park them",
            "RSS before (MB)",
            "RSS parked (MB)",
            "added (MB)",
            "KiB per run",
            f"CPU % while waiting ({QUIET_SECONDS:.0f} s)",
        ]
        return "\n".join(["**Parked runs** waiting on approval", "", table(headers, body)])


async def _count_waiting(env: Env, queue: str) -> int:
    query = (
        f"TaskQueue = '{agent_queue(queue, 'approve')}' AND WaypointStatus = 'awaiting_approval'"
    )
    return (await env.client.count_workflows(query)).count


async def _park(env: Env, queue: str, count: int) -> None:
    for first in range(0, count, WAVE):
        wave = min(WAVE, count - first)
        await asyncio.gather(
            *(
                runs.start_run(
                    env.client, "approve", "pay", task_queue=queue, workflow_id=new_id("parked")
                )
                for _ in range(wave)
            )
        )
        while await _count_waiting(env, queue) < first + wave:
            await asyncio.sleep(0.2)


async def parked_row(env: Env, count: int, cache: int | None) -> ParkedRow:
    """Park `count` runs on a fresh worker with the given workflow cache size (None: default)."""
    queue = f"parked-{cache if cache is not None else 'default'}"
    worker = WorkerProcess(env.server.address, queue, env.work / "parked", cache=cache)
    try:
        await worker.ready(env.client)
        warm = [
            await runs.start_run(env.client, stepper_name(WARM_UP_STEPS), "warm", task_queue=queue)
            for _ in range(WARM_UP_RUNS)
        ]
        await asyncio.gather(*(h.result() for h in warm))
        await asyncio.sleep(1)
        baseline = worker.rss()
        started = time.perf_counter()
        await _park(env, queue, count)
        park_seconds = time.perf_counter() - started
        await asyncio.sleep(2)
        parked_rss = worker.rss()
        cpu = worker.cpu()
        await asyncio.sleep(QUIET_SECONDS)
        cpu_percent = (worker.cpu() - cpu) / QUIET_SECONDS * 100
        label = "waypoint default (200)" if cache is None else f"{cache}"
        return ParkedRow(label, count, park_seconds, baseline, parked_rss, cpu_percent)
    finally:
        worker.stop()


async def parked(env: Env, count: int, caches: tuple[int | None, ...] = (None, 50)) -> Parked:
    """One row per cache size, each on its own worker and task queue."""
    result = Parked()
    for cache in caches:
        result.rows.append(await parked_row(env, count, cache))
    return result
