"""Sub-agent runs as the parent sees them: `await_child` re-attaches, `child_spent` reads totals."""

from __future__ import annotations

from temporalio import activity

from waypoint._activities.heartbeat import heartbeating
from waypoint.protocol import MEMO_KEY, RunMemo, RunResult


@activity.defn(name="waypoint.await_child")
async def await_child(workflow_id: str) -> RunResult:
    """The run's result, heartbeating meanwhile: the parent re-attaches, never starts a second."""
    handle = activity.client().get_workflow_handle(workflow_id, result_type=RunResult)
    return await heartbeating(handle.result(), f"await {workflow_id}")


@activity.defn(name="waypoint.child_spent")
async def child_spent(workflow_id: str) -> RunMemo:
    """What a child that ended without a result shows it spent: its memo, or nothing.

    A cancelled run writes its final totals there as it ends (`workflows/cancel.py`).
    """
    handle = activity.client().get_workflow_handle(workflow_id)
    described = await heartbeating(handle.describe(), f"spent {workflow_id}")
    memo = await described.memo_value(MEMO_KEY, None, type_hint=RunMemo)
    return memo or RunMemo(state="failed", detail="no memo")
