"""What the console shows, read from Temporal: runs from visibility, one run in full.

Lists are `waypoint.client.listing`'s, narrowed by the search attributes every run keeps
(`waypoint.protocol.search_attributes`): a thousand waiting runs cost one call. One run's page
adds its ledger (a worker's answer, the result of a finished run, or the memo's recent steps)
and each step's latency, read from the activity events of its history.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from pydantic import BaseModel
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.service import RPCError

from waypoint.client import listing, runs, views
from waypoint.console.people import NAME
from waypoint.console.problems import Problem
from waypoint.protocol import PendingApproval, PendingQuestion, StepRecord, Unresolved
from waypoint.protocol.states import STATES


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
    parts: list[str] = []
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
        parts += ["WaypointPendingApprovals > 0", "ExecutionStatus = 'Running'"]
    return listing.where(*parts)


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
