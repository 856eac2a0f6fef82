"""Throughput: many concurrent runs of a few steps each, steps per second, Waypoint vs raw."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from bench import history
from bench.agents import stepper, stepper_name
from bench.harness import Env, new_id, raw_sizes, time_waypoint
from bench.raw_workflow import RawSteps
from bench.stats import Spread, ratio, table
from waypoint.client import runs

QUEUE, RAW_QUEUE = "throughput", "throughput-raw"


@dataclass
class Throughput:
    """Steps per second of each system, one value per repetition."""

    runs: int
    steps: int
    waypoint: list[float] = field(default_factory=list)
    raw: list[float] = field(default_factory=list)

    def report(self) -> str:
        """The throughput table."""
        rows = [
            ["Waypoint", Spread.of(self.waypoint).show()],
            ["raw Temporal", Spread.of(self.raw).show()],
            ["Waypoint / raw", ratio(self.waypoint, self.raw).show("{:.2f}")],
        ]
        head = f"**Throughput**: {self.runs} concurrent runs of {self.steps} steps"
        return "\n".join([head, "", table(["system", "steps per second"], rows)])


async def throughput(env: Env, count: int, steps: int, reps: int) -> Throughput:
    """`reps` interleaved rounds of `count` concurrent runs on each system."""
    result = Throughput(count, steps)
    name = stepper_name(steps)
    async with env.waypoint_worker([stepper(steps)], QUEUE), env.raw_worker(RAW_QUEUE):
        _, warm = await time_waypoint(env.client, name, QUEUE)
        sizes = raw_sizes(history.activity_sizes(await history.fetch(env.client, warm)))

        async def waypoint() -> None:
            handles = await asyncio.gather(
                *(
                    runs.start_run(env.client, name, "benchmark", task_queue=QUEUE)
                    for _ in range(count)
                )
            )
            await asyncio.gather(*(h.result() for h in handles))

        async def raw() -> None:
            await asyncio.gather(
                *(
                    env.raw_client.execute_workflow(
                        RawSteps.run, sizes, id=new_id("raw"), task_queue=RAW_QUEUE
                    )
                    for _ in range(count)
                )
            )

        for rep in range(reps):
            order = [(result.waypoint, waypoint), (result.raw, raw)]
            for into, run in order if rep % 2 == 0 else order[::-1]:
                started = time.perf_counter()
                await run()
                into.append(count * steps / (time.perf_counter() - started))
    return result
