"""Runs in a list, from one visibility query and each run's memo: no worker asked, no query per run.

`waypoint list` and the console's lists both read here, so both list a run once (by its latest
execution, not each segment it continued as new from) and show it in the same state.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterable

from pydantic import BaseModel
from temporalio.client import Client, WorkflowExecution

from waypoint.client import views
from waypoint.protocol import PendingApproval, PendingQuestion, Unresolved
from waypoint.protocol.run import MEMO_KEY, RunMemo
from waypoint.protocol.states import STATES, shown_state

RUNS = "WorkflowType = 'AgentWorkflow' AND ExecutionStatus != 'ContinuedAsNew'"
"""Every run, once: a run that continued as new is listed by its latest execution."""
MAX_LIST = 1000
NAME = re.compile(r"^[A-Za-z0-9_.:@-]{1,200}$")
"""An agent or run name a query may quote: nothing in it can end the quoted string."""


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


def where(*clauses: str) -> str:
    """The visibility query for runs (`RUNS`) narrowed by `clauses`."""
    return " AND ".join([RUNS, *clauses])


def query(
    *,
    agents: Iterable[str] | None = None,
    states: Iterable[str] = (),
    waiting: bool = False,
    running: bool = False,
) -> str:
    """The query for runs of `agents` (None: any) in one of `states` (none: any), still running.

    `waiting`: only runs with an approval waiting. '' when `agents` is empty: no run can
    match. A run that continued as new is listed once.

    Raises:
        ValueError: An agent that is not a name, or a state that is not one (`STATES`).
    """
    parts: list[str] = []
    if agents is not None:
        names = sorted(agents)
        if not names:
            return ""
        for name in names:
            if not NAME.match(name):
                raise ValueError(f"agent {name[:80]!r} is not a name (letters, digits, _.:@-)")
        parts.append(f"WaypointAgent IN ({', '.join(repr(name) for name in names)})")
    if states := sorted(states):
        for state in set(states) - set(STATES):
            raise ValueError(f"state {state!r} is not one of {', '.join(sorted(STATES))}")
        parts.append(f"WaypointStatus IN ({', '.join(repr(state) for state in states)})")
    if waiting:
        parts.append("WaypointPendingApprovals > 0")
    if waiting or running:
        parts.append("ExecutionStatus = 'Running'")
    return where(*parts)


async def list_runs(client: Client, query: str = RUNS, limit: int = 100) -> list[RunRow]:
    """The newest runs matching `query` (from `where`), with what each memo says."""
    if not query:
        return []
    limit = max(1, min(limit, MAX_LIST))
    rows = []
    async for execution in client.list_workflows(query, limit=limit, page_size=limit):
        rows.append(await _row(execution))
    return rows


async def _row(execution: WorkflowExecution) -> RunRow:
    attrs = {key.name: value for key, value in execution.typed_search_attributes}
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
