"""Runs started with a history budget of the test's choosing, to make them continue-as-new."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from temporalio.client import Client, WorkflowHandle

from waypoint.protocol import HistoryLimits, RunInput, RunResult


async def start_bounded(
    client: Client, workflow_id: str, task_queue: str, history: HistoryLimits, **run: str
) -> WorkflowHandle[Any, RunResult]:
    """Start `run["agent"]` (the payer) on `run["task"]` ("long") straight through Temporal,
    its history held to `history`."""
    agent, task = run.get("agent", "payer"), run.get("task", "long")
    return await client.start_workflow(
        "AgentWorkflow",
        RunInput(agent=agent, task=task, history=history),
        id=workflow_id,
        task_queue=task_queue,
        result_type=RunResult,
    )


async def flood_until_handed_over(
    handle: WorkflowHandle[Any, Any],
    first: str,
    send: Callable[[int], Awaitable[None]],
    rounds: int = 100,
) -> str:
    """Call `send(i)` while the run is in segment `first` until it continues-as-new; the new
    segment's run id. A round is sent only once the worker has taken the last (no workflow
    task pending): a busy machine's worker falls behind, and the budget counts what it took."""
    sent, deadline = 0, asyncio.get_running_loop().time() + 180
    while asyncio.get_running_loop().time() < deadline:
        seen = await handle.describe()
        if (seen.run_id or first) != first:
            return seen.run_id or ""
        if seen.raw_description.HasField("pending_workflow_task"):
            await asyncio.sleep(0.05)  # the worker has not taken the last round yet
            continue
        if sent == rounds:
            break
        await send(sent)
        sent += 1
    raise AssertionError(f"the run never continued-as-new ({sent} rounds sent)")


async def does_nothing_of_its_own(handle: WorkflowHandle[Any, Any]) -> bool:
    """Whether the run's own work is done (a waiting run's notice plan read, ...): no activity
    pending and its last event a completed workflow task; what a reader adds is then counted."""
    described = await handle.describe()
    last = [e async for e in handle.fetch_history_events()][-1]
    return not described.raw_description.pending_activities and last.HasField(
        "workflow_task_completed_event_attributes"
    )
