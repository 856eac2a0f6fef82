"""`await_child`: wait for a sub-agent run that already held its id when the parent started it."""

from __future__ import annotations

from temporalio import activity

from waypoint.activities.heartbeat import heartbeating
from waypoint.protocol import RunResult


@activity.defn(name="waypoint.await_child")
async def await_child(workflow_id: str) -> RunResult:
    """The run's result, heartbeating meanwhile: the parent re-attaches, never starts a second."""
    handle = activity.client().get_workflow_handle(workflow_id, result_type=RunResult)
    return await heartbeating(handle.result(), f"await {workflow_id}")
