"""One run in full, and its ledger: what `status`, `ledger` and a console page read.

The ledger is the run's own when anything can answer for it (a completed run's result, a
worker), with the steps it archived across continue-as-new read back from history; else the
memo's recent steps, with a note saying so. Every read here is a describe, a query or a history
read: none adds an event to the run.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from pydantic import BaseModel
from temporalio.client import Client, WorkflowQueryFailedError
from temporalio.service import RPCError

from waypoint.client import evidence, runs, views
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
    segment: int = 0
    """The history segment it ran in: its times are seconds since that segment started."""


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
    """By step id; seconds since its history segment started."""
    output: str = ""
    unhosted: str = ""
    task: str = ""
    """What the run was given to do."""
    attachments: list[str] = []
    tools: dict[str, evidence.ToolNote] = {}
    """By name, from the run's spec snapshot: what each does, what approving a call does."""
    steps: dict[str, evidence.StepEvidence] = {}
    """By step id: arguments and result (cut to a preview, said by `whole`), words, searches."""
    segments: list[evidence.Segment] = []
    stopped: evidence.Stopped | None = None
    """Who stopped the run (or asked to), when and why."""
    not_run: dict[str, str] = {}
    """Steps a closed run left waiting: never run, and why."""
    note: str = ""
    """What of the run's history could not be read."""


SHOWN = {"detail", "turn", "total_tokens", "cost_usd", "cost_known", "policy"}
WAITS = {"pending_approvals", "pending_questions", "unresolved"}
"""What a closed run no longer waits for, whatever it last said."""
NEVER_RAN = {
    "awaiting_approval": "approval",
    "awaiting_answer": "an answer",
    "scheduled": "its turn",
}
"""Step statuses that a closed run leaves as never run, and what they waited for."""


async def run_detail(client: Client, run: str) -> RunDetail:
    """One run in full: what it was given, its waits, ledger, evidence, and who stopped it.

    Raises:
        RunNotFoundError: No run has that id.
    """
    seen = await views.view(client, run, timeout=views.QUICK)
    shown = seen.live or seen.memo
    fields = shown.model_dump(include=SHOWN | (set() if seen.closed else WAITS)) if shown else {}
    refusals = [i.model_dump(mode="json") for i in shown.ignored_signals] if shown else []
    steps = await ledger(client, seen)
    found = await evidence.read(client, run, seen.run_id)
    closed = seen.closed and seen.execution != "completed"
    not_run = {
        r.step_id: f"not run: the run was {seen.execution} as it waited for {NEVER_RAN[r.status]}"
        for r in steps.steps
        if closed and r.status in NEVER_RAN
    }
    timings = {
        step: StepTiming(**e.model_dump(include=set(StepTiming.model_fields)))
        for step, e in found.steps.items()
        if e.scheduled_at is not None
    }
    return RunDetail(
        **fields,
        **{name: getattr(seen, name) for name in ("run", "agent", "state", "execution")},
        **{name: getattr(seen, name) for name in ("reason", "as_of", "unhosted")},
        **{name: getattr(found, name) for name in ("task", "attachments", "tools")},
        **{name: getattr(found, name) for name in ("segments", "stopped", "note")},
        refusals=refusals,
        ledger=steps.steps,
        output=steps.output,
        timings=timings,
        steps={step: e.preview() for step, e in found.steps.items()},
        not_run=not_run,
    )


async def step_evidence(client: Client, run: str, step_id: str) -> evidence.StepEvidence | None:
    """One step's whole evidence (arguments and result uncut); None if the run has no such step.

    Raises:
        RunNotFoundError: No run has that id.
    """
    latest = await views.describe(client, run)
    return (await evidence.read(client, run, latest.run_id)).steps.get(step_id)


Turn = tuple[int, list[StepRecord]]


def grouped(shown: RunDetail) -> list[tuple[int, list[Turn]]]:
    """The ledger by history segment, then by turn (`tN.` of each step id), in order.

    A turn is in the segment its first recorded step ran in; one with none recorded (operator
    lines, steps archived) stays with the turn before it.
    """
    turns: dict[int, list[StepRecord]] = {}
    for record in shown.ledger:
        head = record.step_id.partition(".")[0]
        turns.setdefault(int(head[1:]) if head[1:].isdigit() else 0, []).append(record)
    segments: dict[int, list[Turn]] = {}
    segment = 0
    for turn, records in sorted(turns.items()):
        ran = [shown.steps[r.step_id] for r in records if r.step_id in shown.steps]
        segment = min((e.segment for e in ran if e.scheduled_at is not None), default=segment)
        segments.setdefault(segment, []).append((turn, records))
    return sorted(segments.items())
