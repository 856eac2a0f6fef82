"""What the console shows, read from Temporal: runs from visibility, one run in full.

Lists come from one visibility query over the search attributes every run keeps
(`waypoint.protocol.search_attributes`) and the memo each run writes (`RunMemo`: what it waits
for, its tokens and cost), never from a query per run: a thousand waiting runs cost one call.
One run's page adds its ledger (a worker's answer, the result of a finished run, or the memo's
recent steps) and each step's latency, read from the activity events of its history.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from pydantic import BaseModel
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecution
from temporalio.service import RPCError

from waypoint.client import runs, views
from waypoint.console.people import NAME
from waypoint.console.problems import Problem
from waypoint.protocol import PendingApproval, PendingQuestion, StepRecord, Unresolved
from waypoint.protocol.base import RunState
from waypoint.protocol.run import MEMO_KEY, RunMemo

STATES = set(RunState.__args__)  # type: ignore[attr-defined]
MAX_LIST = 1000


class RunRow(BaseModel):
    """One run in a list: what visibility and the run's memo say, no worker asked."""

    run: str
    agent: str
    state: str
    execution: str
    started_at: str
    closed_at: str = ""
    turn: int = 0
    total_tokens: int = 0
    cost_usd: float = 0.0
    detail: str = ""
    pending_approvals: list[PendingApproval] = []
    pending_questions: list[PendingQuestion] = []
    unresolved: list[Unresolved] = []


class StepTiming(BaseModel):
    """When a step's activity was scheduled, started and ended (its latest attempt)."""

    scheduled_at: float
    started_at: float | None = None
    ended_at: float | None = None
    attempts: int = 0
    """Of its latest activity: Temporal records the start of its last attempt only."""


class RunDetail(BaseModel):
    """One run in full, as its page and `GET /api/runs/{run}` show it."""

    run: str
    agent: str
    state: str
    execution: str
    detail: str = ""
    reason: str = ""
    turn: int = 0
    total_tokens: int = 0
    cost_usd: float = 0.0
    cost_known: bool = True
    as_of: str = ""
    """When the memo shown was written; '' when a worker answered live."""
    policy: str = ""
    pending_approvals: list[PendingApproval] = []
    pending_questions: list[PendingQuestion] = []
    unresolved: list[Unresolved] = []
    refusals: list[dict[str, Any]] = []
    ledger: list[StepRecord] = []
    timings: dict[str, StepTiming] = {}
    """By step id; seconds since its current history segment started (its latest execution)."""
    output: str = ""
    unhosted: str = ""


def quoted(value: str, what: str) -> str:
    """`value` as a visibility query string, refused unless it looks like a name."""
    if not NAME.match(value):
        raise Problem(422, f"{what} {value[:80]!r} is not a name (letters, digits, _.:@-)")
    return f"'{value}'"


def query(
    *,
    agents: Iterable[str] | None = None,
    state: str | None = None,
    waiting: bool = False,
) -> str:
    """The visibility query for a list: by agent, by state, only runs waiting for approval.

    A run that continued as new is listed once, by its latest execution.
    """
    parts = ["WorkflowType = 'AgentWorkflow'", "ExecutionStatus != 'ContinuedAsNew'"]
    if agents is not None:
        names = sorted(agents)
        if not names:
            return ""
        parts.append(f"WaypointAgent IN ({', '.join(quoted(a, 'agent') for a in names)})")
    if state:
        if state not in STATES:
            raise Problem(422, f"state {state!r} is not one of {', '.join(sorted(STATES))}")
        parts.append(f"WaypointStatus = '{state}'")
    if waiting:
        parts.append("WaypointPendingApprovals > 0")
    if waiting:
        parts.append("ExecutionStatus = 'Running'")
    return " AND ".join(parts)


async def list_runs(client: Client, visibility_query: str, limit: int = 100) -> list[RunRow]:
    """The newest runs matching the query, with what each memo says."""
    if not visibility_query:
        return []
    limit = max(1, min(limit, MAX_LIST))
    rows = []
    async for execution in client.list_workflows(visibility_query, limit=limit, page_size=limit):
        rows.append(await _row(execution))
    return rows


async def _row(execution: WorkflowExecution) -> RunRow:
    attrs = {key.name: value for key, value in execution.typed_search_attributes}
    memo = await _memo(execution)
    return RunRow(
        run=execution.id,
        agent=str(attrs.get("WaypointAgent", "")),
        state=_state(execution, memo, attrs),
        execution=views.execution_name(execution.status),
        started_at=execution.start_time.isoformat(),
        closed_at=execution.close_time.isoformat() if execution.close_time else "",
        turn=memo.turn if memo else int(attrs.get("WaypointTurns", 0) or 0),
        total_tokens=memo.total_tokens if memo else 0,
        cost_usd=memo.cost_usd if memo else float(attrs.get("WaypointCostUsd", 0.0) or 0.0),
        detail=memo.detail if memo else "",
        pending_approvals=memo.pending_approvals if memo else [],
        pending_questions=memo.pending_questions if memo else [],
        unresolved=memo.unresolved if memo else [],
    )


async def _memo(execution: WorkflowExecution) -> RunMemo | None:
    """The run's memo; None when it has none yet or it does not read (never fails the list)."""
    with contextlib.suppress(Exception):
        value = await execution.memo_value(MEMO_KEY, type_hint=RunMemo, default=None)
        return value if isinstance(value, RunMemo) else None
    return None


def _state(execution: WorkflowExecution, memo: RunMemo | None, attrs: dict[str, Any]) -> str:
    name = views.execution_name(execution.status)
    inner = memo.state if memo else str(attrs.get("WaypointStatus", "") or "starting")
    if name == "completed":
        return inner if inner in ("done", "refused") else "done"
    return name if name != "running" else inner


async def run_detail(client: Client, run: str) -> RunDetail:
    """One run in full: status, waits, ledger, refusals, each step's latency.

    Raises:
        RunNotFoundError: No run has that id.
    """
    seen = await views.view(client, run, timeout=views.QUICK)
    live, memo = seen.live, seen.memo
    shown: Any = live or memo
    detail = RunDetail(
        run=run,
        agent=seen.agent,
        state=seen.state,
        execution=seen.execution,
        reason=seen.reason,
        as_of=seen.as_of,
        unhosted=seen.unhosted,
    )
    if shown is not None:
        detail = detail.model_copy(
            update={
                "detail": shown.detail,
                "turn": shown.turn,
                "total_tokens": shown.total_tokens,
                "cost_usd": shown.cost_usd,
                "cost_known": shown.cost_known,
                "policy": shown.policy,
                "pending_approvals": [] if seen.closed else shown.pending_approvals,
                "pending_questions": [] if seen.closed else shown.pending_questions,
                "unresolved": [] if seen.closed else shown.unresolved,
                "refusals": [i.model_dump(mode="json") for i in shown.ignored_signals],
            }
        )
    ledger, output = await _ledger(client, run, seen)
    if not ledger and memo is not None:
        ledger = list(memo.last_steps)
    timings = await step_timings(client, run, seen.run_id)
    return detail.model_copy(update={"ledger": ledger, "timings": timings, "output": output})


async def _ledger(client: Client, run: str, seen: views.RunView) -> tuple[list[StepRecord], str]:
    """The whole ledger: the result's for a finished run, a worker's answer for a live one."""
    with contextlib.suppress(Exception):  # a page shows what it can: the memo's steps then
        if seen.execution == "completed":
            result = await runs.handle(client, run).result()
            return (await runs.whole_ledger(client, run, result.ledger))[0], result.output
        if seen.live is not None:
            carried = await runs.handle(client, run).query("ledger", result_type=list[StepRecord])
            return (await runs.whole_ledger(client, run, carried))[0], ""
    return [], ""


ACTIVITY_EVENTS = {
    EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED: "scheduled",
    EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED: "started",
    EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED: "ended",
    EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED: "ended",
    EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT: "ended",
    EventType.EVENT_TYPE_ACTIVITY_TASK_CANCELED: "ended",
}


async def step_timings(client: Client, run: str, run_id: str) -> dict[str, StepTiming]:
    """Each step's latest activity: when it was scheduled, started and ended.

    In seconds since the run's current history segment started; empty if it cannot be read.
    """
    timings: dict[str, StepTiming] = {}
    by_event: dict[int, str] = {}
    origin: datetime | None = None
    with contextlib.suppress(RPCError, Exception):
        handle = client.get_workflow_handle(run, run_id=run_id or None)
        async for event in handle.fetch_history_events():
            at = event.event_time.ToDatetime()
            origin = origin or at
            offset = (at - origin).total_seconds()
            what = ACTIVITY_EVENTS.get(event.event_type)
            if what == "scheduled":
                attrs = event.activity_task_scheduled_event_attributes
                step = attrs.activity_id.partition("#")[0]
                by_event[event.event_id] = step
                timings[step] = StepTiming(scheduled_at=offset)
            elif what is not None:
                step = by_event.get(_scheduled_id(event), "")
                if step in timings and what == "started":
                    timings[step].started_at = offset
                    timings[step].attempts = event.activity_task_started_event_attributes.attempt
                elif step in timings:
                    timings[step].ended_at = offset
    return timings


def _scheduled_id(event: Any) -> int:
    for name in (
        "activity_task_started_event_attributes",
        "activity_task_completed_event_attributes",
        "activity_task_failed_event_attributes",
        "activity_task_timed_out_event_attributes",
        "activity_task_canceled_event_attributes",
    ):
        if event.HasField(name):
            return getattr(event, name).scheduled_event_id
    return 0
