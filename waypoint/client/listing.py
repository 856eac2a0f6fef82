"""Runs in a list, from one visibility query and each run's memo: no worker asked, no query per run.

`waypoint list` and the console's lists both read here, so both list a run once (by its latest
execution, not each segment it continued as new from) and show it in the same state.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterable
from datetime import UTC, date, datetime, time, timedelta
from urllib.parse import urlencode

from pydantic import BaseModel, ConfigDict
from temporalio.client import Client, WorkflowExecution

from waypoint.client import views
from waypoint.protocol import PendingApproval, PendingQuestion, Unresolved
from waypoint.protocol import search_attributes as sa
from waypoint.protocol.run import MEMO_KEY, RunMemo
from waypoint.protocol.states import PARKED_STATES, STATES, STUCK_STATES, shown_state

RUNS = "WorkflowType = 'AgentWorkflow' AND ExecutionStatus != 'ContinuedAsNew'"
"""Every run, once: a run that continued as new is listed by its latest execution."""
MAX_LIST = 1000
NAME = re.compile(r"^[A-Za-z0-9_.:@-]{1,200}$")
"""An agent or run name (or a run id's start) a query may quote: nothing in it can end the
quoted string."""


class RunSummary(BaseModel):
    """A run at a glance: its state (`protocol.states.shown_state`), spend and waits."""

    run: str
    agent: str
    state: str
    execution: str
    """`running`, or how Temporal closed it: completed, failed, cancelled, terminated, ..."""
    turn: int = 0
    total_tokens: int = 0
    cost_usd: float = 0.0
    detail: str = ""
    pending_approvals: list[PendingApproval] = []
    pending_questions: list[PendingQuestion] = []
    unresolved: list[Unresolved] = []


class RunRow(RunSummary):
    """One run in a list: what visibility and the run's memo say, no worker asked."""

    started_at: str
    closed_at: str = ""
    run_id: str = ""
    waiting_since: str = ""
    """Since when it waits for a person ('' when it does not)."""


def where(*clauses: str) -> str:
    """The visibility query for runs (`RUNS`) narrowed by `clauses`."""
    return " AND ".join([RUNS, *clauses])


WAITING: dict[str, str] = {
    "approval": "WaypointPendingApprovals > 0",
    "approver": "(WaypointPendingApprovals > 0 OR WaypointStatus = 'awaiting_answer')",
    "operator": f"WaypointStatus IN ({', '.join(map(repr, sorted(STUCK_STATES)))})",
    "anyone": f"WaypointStatus IN ({', '.join(map(repr, sorted(PARKED_STATES)))})",
}
"""What a run may wait on: an approval; a call an approver moves (approve, reject, answer);
an operator (a stuck run); anyone. A waiting list is sorted oldest-waiting first."""


class Search(BaseModel):
    """A list's filters as a link carries them: a saved link reproduces the view.

    Text as it came (a URL's query string, CLI options); `query` checks every field before any
    of it reaches a visibility query. `waiting="me"` is `approval` on the agents the caller
    decides for: the caller narrows `agents`.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    run: str = ""
    """A run id, or the start of one."""
    agent: str = ""
    state: str = ""
    waiting: str = ""
    started_from: str = ""
    """A date (`2026-12-01`, from its start) or a time (ISO 8601, UTC unless it says)."""
    started_to: str = ""
    """A date (through its end) or a time."""
    closed_from: str = ""
    closed_to: str = ""

    def link(self) -> str:
        """The query string that reproduces this search ('' when it filters nothing)."""
        return urlencode({k: v for k, v in self.model_dump().items() if v})

    @property
    def waits(self) -> bool:
        """Whether it lists waiting runs (sorted oldest-waiting first)."""
        return bool(self.waiting)


def moment(text: str, *, end: bool = False) -> datetime:
    """A filter's date or time as a UTC instant; a bare date means its start (or, `end`, its end).

    Raises:
        ValueError: Neither a date nor an ISO 8601 time.
    """
    value = text.strip()
    try:
        if len(value) == 10:
            day = datetime.combine(date.fromisoformat(value), time.min, UTC)
            return _within(day, timedelta(days=1) if end else timedelta())
        when = datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(f"{text[:40]!r} is not a date (2026-12-01) or a time (ISO 8601)") from None
    return _within(when if when.tzinfo else when.replace(tzinfo=UTC), timedelta())


EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
LATEST = datetime(9000, 1, 1, tzinfo=UTC)


def _within(when: datetime, later: timedelta) -> datetime:
    """`when + later` in UTC, held between `EARLIEST` and `LATEST` (no run lies outside)."""
    if when.replace(tzinfo=None) < datetime(1970, 1, 3):
        return EARLIEST
    if when.replace(tzinfo=None) > datetime(8999, 12, 30):
        return LATEST
    return (when + later).astimezone(UTC)


def stamp(when: datetime) -> str:
    """A UTC instant as a visibility query quotes it (nothing but digits and separators)."""
    utc = when.astimezone(UTC)
    return utc.strftime("%Y-%m-%dT%H:%M:%S" + (".%fZ" if utc.microsecond else "Z"))


def query(
    *,
    agents: Iterable[str] | None = None,
    states: Iterable[str] = (),
    waiting: bool | str = False,
    running: bool = False,
    excluded: Iterable[str] = (),
    search: Search | None = None,
) -> str:
    """The query for runs of `agents` (None: any) in one of `states` (none: any), by `search`.

    `excluded`: agents left out (a `*` role with a lower one named for them).
    `waiting`: True or `approval` for runs with an approval waiting, or a `WAITING` key; a
    waiting run is a running one. '' when `agents` is empty: no run can match. A run that
    continued as new is listed once. Every value is checked, never pasted: names and ids by
    pattern, states by name, times re-printed from parsed instants.

    Raises:
        ValueError: A name, state, wait, date or time that is not one.
    """
    s = search or Search()
    parts: list[str] = []
    if s.agent:
        _check_name(s.agent)
        agents = [s.agent] if agents is None else [a for a in agents if a == s.agent]
    names = None if agents is None else sorted(agents)
    left_out = sorted(excluded)
    for name in [*(names or []), *left_out]:
        _check_name(name)
    if names:
        parts.append(f"WaypointAgent IN ({', '.join(repr(name) for name in names)})")
    if left_out:
        parts.append(f"WaypointAgent NOT IN ({', '.join(repr(name) for name in left_out)})")
    wanted: set[str] = {*states, *([s.state] if s.state else [])}
    if wanted:
        for state in wanted - set(STATES):
            raise ValueError(f"state {state[:40]!r} is not one of {', '.join(sorted(STATES))}")
        parts.append(f"WaypointStatus IN ({', '.join(repr(state) for state in sorted(wanted))})")
    wait = "approval" if waiting is True else (waiting or "")
    wait = wait or ("approval" if s.waiting == "me" else s.waiting)
    if wait:
        if wait not in WAITING:
            raise ValueError(f"waiting {wait[:40]!r} is not one of me, {', '.join(WAITING)}")
        parts.append(WAITING[wait])
    if wait or running:
        parts.append("ExecutionStatus = 'Running'")
    if s.run:
        if not NAME.match(s.run):
            raise ValueError(f"run {s.run[:80]!r} is not a run id (letters, digits, _.:@-)")
        parts.append(f"WorkflowId STARTS_WITH '{s.run}'")
    for field, bound, end in (
        ("StartTime", s.started_from, False),
        ("StartTime", s.started_to, True),
        ("CloseTime", s.closed_from, False),
        ("CloseTime", s.closed_to, True),
    ):
        if bound:
            parts.append(f"{field} {'<' if end else '>='} '{stamp(moment(bound, end=end))}'")
    return "" if names == [] else where(*parts)


def _check_name(name: str) -> None:
    if not NAME.match(name):
        raise ValueError(f"agent {name[:80]!r} is not a name (letters, digits, _.:@-)")


async def list_runs(client: Client, query: str = RUNS, limit: int = 100) -> list[RunRow]:
    """The newest runs matching `query` (from `where`), with what each memo says."""
    if not query:
        return []
    limit = max(1, min(limit, MAX_LIST))
    rows = []
    async for execution in client.list_workflows(query, limit=limit, page_size=limit):
        rows.append(await row(execution))
    return rows


async def row(execution: WorkflowExecution) -> RunRow:
    """One run as a list shows it, from its visibility row and memo."""
    attrs = {key.name: value for key, value in execution.typed_search_attributes}
    since = attrs.get(sa.WAITING_SINCE.name)
    memo = await _memo(execution)
    inner = memo.state if memo else str(attrs.get("WaypointStatus", "") or "starting")
    name = views.execution_name(execution.status)
    return RunRow(
        run=execution.id,
        agent=str(attrs.get("WaypointAgent", "")),
        state=shown_state(name, inner),
        execution=name,
        started_at=execution.start_time.isoformat(),
        closed_at=execution.close_time.isoformat() if execution.close_time else "",
        run_id=execution.run_id,
        waiting_since=since.isoformat() if isinstance(since, datetime) else "",
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
