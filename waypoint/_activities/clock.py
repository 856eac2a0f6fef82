"""`waypoint.clock`: the time, recorded, for a workflow decision that must replay the same.

`workflow.now()` is the time of the workflow task an activation belongs to, and which task an
event lands in can differ between a live run and its replay (a workflow task that timed out, a
local activity that outlasted the task's heartbeat). A decision that compares times (is this
observation stale?) asks here instead: the answer is an activity's result, replayed from its
history event.
"""

from __future__ import annotations

from datetime import UTC, datetime

from temporalio import activity


@activity.defn(name="waypoint.clock")
async def clock() -> str:
    """The worker's clock now, ISO 8601 with its time zone."""
    return datetime.now(UTC).isoformat()
