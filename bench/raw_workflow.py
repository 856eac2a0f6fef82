"""The raw-Temporal baselines: one activity per step with given payload sizes, nothing else.

Sizes are (input bytes, output bytes) per step, measured from a Waypoint run of the same shape,
so both sides move the same bytes through history. `RawSteps` runs its steps one after the
other; `RawTurns` runs a model step, then a turn's tool steps at once. No I/O at import: the
sandbox loads it.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import timedelta

from temporalio import activity, workflow


@activity.defn(name="raw.step")
async def raw_step(payload: str, reply_size: int) -> str:
    """A no-op step that answers with `reply_size` characters."""
    return "y" * reply_size


@workflow.defn(name="RawSteps")
class RawSteps:
    """Runs one activity per step, one after the other."""

    @workflow.run
    async def run(self, sizes: list[tuple[int, int]]) -> int:
        """Each step sends `in` characters and gets `out` back."""
        for size_in, size_out in sizes:
            await workflow.execute_activity(
                raw_step,
                args=["x" * size_in, size_out],
                start_to_close_timeout=timedelta(minutes=5),
            )
        return len(sizes)


@dataclass(frozen=True)
class TurnShape:
    """`turns` turns of one model step then `calls` tool steps at once, then a final model step."""

    turns: int
    calls: int
    model: tuple[int, int]
    """(input, output) characters of a model step."""
    tool: tuple[int, int]
    """(input, output) characters of a tool step."""


async def _step(size: tuple[int, int]) -> str:
    size_in, size_out = size
    return await workflow.execute_activity(
        raw_step, args=["x" * size_in, size_out], start_to_close_timeout=timedelta(minutes=5)
    )


@workflow.defn(name="RawTurns")
class RawTurns:
    """An agent's shape without the agent: per turn a model activity, then parallel tools."""

    @workflow.run
    async def run(self, shape: TurnShape) -> int:
        """Returns the number of steps taken."""
        for _ in range(shape.turns):
            await _step(shape.model)
            await asyncio.gather(*(_step(shape.tool) for _ in range(shape.calls)))
        await _step(shape.model)
        return shape.turns * (shape.calls + 1) + 1
