"""One run in full, and its ledger: what `status`, `ledger` and a console page read.

The ledger is the run's own when anything can answer for it (a completed run's result, a
worker), with the steps it archived across continue-as-new read back from history; else the
memo's recent steps, with a note saying so. Every read here is a describe, a query or a history
read: none adds an event to the run.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from pydantic import BaseModel
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowQueryFailedError
from temporalio.service import RPCError

from waypoint.client import runs, views
from waypoint.client.listing import RunSummary
from waypoint.errors import WaypointError
from waypoint.protocol import StepRecord


@dataclass
class Ledger:
    """A run's steps, and where they came from."""

    steps: list[StepRecord]
    whole: bool
    """The run's own ledger (archived steps read back), not the memo's recent steps."""
    note: str = ""
    """Why it is not whole, or which archived steps could not be read back; '' when whole."""
    output: str = ""
    """A completed run's output."""


async def _own(client: Client, seen: views.RunView) -> tuple[list[StepRecord], str] | None:
    """The ledger the run holds and its output, from its result or a worker; None if neither.

    A closed run is asked too when a worker polls its queue (the query replays it), so it is
    not left to its memo's few steps, whose summaries the memo keeps short.
    """
    if seen.execution == "completed":
        final = await runs.handle(client, seen.run).result()
        return final.ledger, final.output
    if seen.live is None and not (seen.closed and await views.has_pollers(client, seen.task_queue)):
        return None
    handle = runs.handle(client, seen.run)
    wait = timedelta(seconds=views.QUICK)
    return await handle.query("ledger", result_type=list[StepRecord], rpc_timeout=wait), ""


async def ledger(client: Client, seen: views.RunView) -> Ledger:
    """The run's whole ledger, or its memo's recent steps with a note saying why."""
    with contextlib.suppress(RPCError, WorkflowQueryFailedError, WaypointError):
        own = await _own(client, seen)  # a worker that left, or cannot replay: the memo then
        if own is not None:
            steps, note = await runs.whole_ledger(client, seen.run, own[0])
            return Ledger(steps, True, note, own[1])
    recent = seen.memo.last_steps if seen.memo else []
    short = f"its last {len(recent)} steps" + (" (the memo shortens summaries)" if recent else "")
    if seen.closed:
        return Ledger(recent, False, f"the run is {seen.execution} and no worker answered; {short}")
    return Ledger(recent, False, f"{seen.fallback_note}; {short}")


class StepTiming(BaseModel):
    """When a step's activity was scheduled, started and ended (its latest attempt)."""

    scheduled_at: float
    started_at: float | None = None
    ended_at: float | None = None
    attempts: int = 0
    """Of its latest activity: Temporal records the start of its last attempt only."""


class RunDetail(RunSummary):
    """One run in full, as its console page and `GET /api/runs/{run}` show it."""

    reason: str = ""
    cost_known: bool = True
    as_of: str = ""
    """When the memo shown was written; '' when a worker answered live."""
    policy: str = ""
    refusals: list[dict[str, Any]] = []
    ledger: list[StepRecord] = []
    timings: dict[str, StepTiming] = {}
    """By step id; seconds since its current history segment started (its latest execution)."""
    output: str = ""
    unhosted: str = ""


SHOWN = {"detail", "turn", "total_tokens", "cost_usd", "cost_known", "policy"}
WAITS = {"pending_approvals", "pending_questions", "unresolved"}
"""What a closed run no longer waits for, whatever it last said."""


async def run_detail(client: Client, run: str) -> RunDetail:
    """One run in full: status, waits, ledger, refusals, each step's latency.

    Raises:
        RunNotFoundError: No run has that id.
    """
    seen = await views.view(client, run, timeout=views.QUICK)
    shown = seen.live or seen.memo
    fields = shown.model_dump(include=SHOWN | (set() if seen.closed else WAITS)) if shown else {}
    refusals = [i.model_dump(mode="json") for i in shown.ignored_signals] if shown else []
    steps = await ledger(client, seen)
    return RunDetail(
        **fields,
        **{name: getattr(seen, name) for name in ("run", "agent", "state", "execution")},
        **{name: getattr(seen, name) for name in ("reason", "as_of", "unhosted")},
        refusals=refusals,
        ledger=steps.steps,
        output=steps.output,
        timings=await step_timings(client, run, seen.run_id),
    )


ACTIVITY_EVENTS = {
    EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED: ("scheduled", ""),
    EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED: ("started", "activity_task_started"),
    EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED: ("ended", "activity_task_completed"),
    EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED: ("ended", "activity_task_failed"),
    EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT: ("ended", "activity_task_timed_out"),
    EventType.EVENT_TYPE_ACTIVITY_TASK_CANCELED: ("ended", "activity_task_canceled"),
}
"""What each activity event says of its step, and the attributes naming its scheduled event."""


async def step_timings(client: Client, run: str, run_id: str) -> dict[str, StepTiming]:
    """Each step's latest activity: when it was scheduled, started and ended.

    In seconds since the run's current history segment started; empty if it cannot be read.
    """
    timings: dict[str, dict[str, Any]] = {}
    by_event: dict[int, str] = {}
    origin: datetime | None = None
    with contextlib.suppress(Exception):
        handle = client.get_workflow_handle(run, run_id=run_id or None)
        async for event in handle.fetch_history_events():
            at = event.event_time.ToDatetime()
            origin = origin or at
            what, attributes = ACTIVITY_EVENTS.get(event.event_type, ("", ""))
            if what == "scheduled":
                step = event.activity_task_scheduled_event_attributes.activity_id.partition("#")[0]
                by_event[event.event_id] = step
                timings[step] = {}
            elif what:
                attrs = getattr(event, f"{attributes}_event_attributes")
                step = by_event.get(attrs.scheduled_event_id, "")
                if step in timings and what == "started":
                    timings[step]["attempts"] = attrs.attempt
            else:
                continue
            if step in timings:
                timings[step][f"{what}_at"] = (at - origin).total_seconds()
    return {step: StepTiming(**times) for step, times in timings.items() if "scheduled_at" in times}
