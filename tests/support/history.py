"""Runs started with a history budget of the test's choosing, to make them continue-as-new."""

from __future__ import annotations

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
