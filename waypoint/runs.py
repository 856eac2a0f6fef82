"""Client-side operations on runs: start, approve, reject, inspect. The CLI is a thin skin on these.

Everything here is an ordinary Temporal client call, so the same can be done with the
`temporal` CLI or the Web UI (e.g. `temporal workflow signal --name approve --input '{...}'`).
"""

from __future__ import annotations

import uuid
from typing import Any

from temporalio.client import Client, WorkflowHandle
from temporalio.common import SearchAttributePair, TypedSearchAttributes
from temporalio.service import RPCError, RPCStatusCode

from waypoint import search_attributes as sa
from waypoint.errors import RunNotFoundError, StepNotPendingError
from waypoint.models import (
    ApprovalDecision,
    Limits,
    PendingApproval,
    RunInput,
    RunResult,
    RunStatus,
    StepOptions,
    StepRecord,
)

WORKFLOW = "AgentWorkflow"


async def start_run(
    client: Client,
    agent: str,
    task: str,
    *,
    task_queue: str,
    workflow_id: str | None = None,
    limits: Limits | None = None,
    options: StepOptions | None = None,
) -> WorkflowHandle[Any, RunResult]:
    """Start a run of `agent` on `task`; the worker snapshots the agent's spec as its first step."""
    run_input = RunInput(agent=agent, task=task, limits=limits, options=options or StepOptions())
    return await client.start_workflow(
        WORKFLOW,
        run_input,
        id=workflow_id or f"{agent}-{uuid.uuid4().hex[:8]}",
        task_queue=task_queue,
        result_type=RunResult,
        search_attributes=TypedSearchAttributes([SearchAttributePair(sa.AGENT, agent)]),
        static_summary=f"{agent}: {task[:200]}",
    )


def handle(client: Client, run: str) -> WorkflowHandle[Any, RunResult]:
    """The handle of a run by its workflow id."""
    return client.get_workflow_handle(run, result_type=RunResult)


async def status(client: Client, run: str) -> RunStatus:
    """Query the run's status; a run that does not exist raises `RunNotFoundError`."""
    try:
        return await handle(client, run).query("status", result_type=RunStatus)
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            raise RunNotFoundError(f"no run {run!r} (see `waypoint list`)") from err
        raise


async def ledger(client: Client, run: str) -> list[StepRecord]:
    """Every step of the run so far."""
    await status(client, run)
    return await handle(client, run).query("ledger", result_type=list[StepRecord])


async def decide(
    client: Client,
    run: str,
    step_id: str,
    *,
    approve: bool,
    reviewer: str,
    reason: str = "",
) -> PendingApproval:
    """Approve or reject a pending tool call, checking first that it is pending."""
    current = await status(client, run)
    pending = {p.step_id: p for p in current.pending_approvals}
    if step_id not in pending:
        waiting = ", ".join(pending) or "none"
        raise StepNotPendingError(
            f"step {step_id!r} of run {run!r} is not awaiting approval (pending: {waiting})"
        )
    approval = pending[step_id]
    decision = ApprovalDecision(
        step_id=step_id,
        reviewer=reviewer,
        reason=reason,
        arguments_hash=approval.arguments_hash,
    )
    await handle(client, run).signal("approve" if approve else "reject", decision)
    return approval
