"""The raw-Temporal baseline: one activity per step with given payload sizes, nothing else.

Sizes are (input bytes, output bytes) per step, measured from a Waypoint run of the same shape,
so both sides move the same bytes through history. No I/O at import: the sandbox loads it.
"""

from __future__ import annotations

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
