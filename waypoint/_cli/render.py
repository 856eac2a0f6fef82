"""What the CLI prints: runs, ledgers and lists for people, or as JSON that is never cut.

Rendering only, no decisions. On a terminal (or at `COLUMNS`) a table fits the width by eliding
one column, never an id; piped, or with `--wide`, every cell is whole, a row to a line, since a
script or a log cannot widen its window. Effect keys, which are long, go on lines of their own
under the ledger table. What a run recorded is escaped: a `[tag]` in it prints as written.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.measure import Measurement
from rich.table import Table
from temporalio.client import Client

from waypoint.client import runs, views
from waypoint.protocol import IgnoredSignal, PendingApproval, RunMemo, RunStatus, StepRecord
from waypoint.protocol.states import FINAL_STATES, RESUMABLE_STATES, STATES

console = Console(highlight=False, soft_wrap=True)
errors = Console(stderr=True, highlight=False, soft_wrap=True)

STATUS_STYLE = {
    "completed": "green",
    "done": "green",
    "error": "red",
    "failed": "red",
    "rejected": "yellow",
    "awaiting_approval": "magenta",
    "scheduled": "cyan",
    "needs_reconciliation": "bold red",
    "aborted": "red",
    "cancelled": "yellow",
    "terminated": "red",
}


def money(cost: float | None) -> str:
    """A cost in USD, or a dash when the model's price is unknown."""
    return "-" if cost is None else f"${cost:.4f}"


def print_json(value: Any) -> None:
    """JSON on stdout, unwrapped, for scripts."""
    sys.stdout.write(json.dumps(value, indent=2, default=str) + "\n")


def styled(status: str) -> str:
    """A state or step status in its colour."""
    style = STATUS_STYLE.get(status, "")
    return f"[{style}]{status}[/]" if style else status


def fits_a_width() -> bool:
    """Whether tables are fitted: stdout is a terminal, or `COLUMNS` names a width.

    rich takes 80 columns for a pipe, which would elide cells a script or a log needs whole.
    """
    return sys.stdout.isatty() or os.environ.get("COLUMNS", "").isdigit()


def print_table(grid: Table, wide: bool = False) -> None:
    """`grid` fitted to the width, or at its own full width when piped or `wide`: no cell cut."""
    if fits_a_width() and not wide:
        console.print(grid, soft_wrap=False)
        return
    grid.expand = False
    full = Measurement.get(console, console.options.update_width(sys.maxsize), grid).maximum
    Console(highlight=False, width=full).print(grid, soft_wrap=False)


def table(columns: list[str], rows: list[list[str]], elastic: str = "") -> Table:
    """A compact table, one line per row; only `elastic` is elided, so ids are never cut.

    It spans the terminal and `elastic` takes what the others leave: rich honours a ratio
    only in an expanded table, and otherwise squeezes every column, dropping narrow ones. On a
    terminal too narrow even so, the columns after the first wrap; none is dropped.
    """
    grid = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False, expand=True)
    for i, column in enumerate(columns):
        if column == elastic:
            grid.add_column(column, no_wrap=True, overflow="ellipsis", ratio=1, min_width=8)
            continue
        grid.add_column(column, no_wrap=i == 0, overflow="fold")
    for row in rows:
        grid.add_row(*row)
    return grid


def ledger_table(records: list[StepRecord]) -> Table:
    """The ledger as a table: one line per step; the summary is elided, never the step id."""
    rows = [
        [
            r.step_id,
            styled(r.status)
            + (f" #{r.attempt}" if r.attempt > 1 else "")
            + (" reconciled" if r.reconciled else ""),
            f"{r.tokens:,}" if r.tokens else "",
            money(r.cost_usd) if r.kind == "model" or r.child_workflow_id else "",
            escape(
                r.summary.replace("\n", " ")
                + (f" (decided by {r.decided_by} at {r.decided_at})" if r.decided_by else "")
                + (f" (asked by {r.rule})" if r.rule and r.rule != r.decided_by else "")
            ),
        ]
        for r in records
    ]
    return table(["step", "status", "tokens", "cost", "summary"], rows, elastic="summary")


def print_ledger(
    records: list[StepRecord],
    note: str = "",
    wide: bool = False,
    shown: RunStatus | RunMemo | None = None,
) -> None:
    """The ledger table, then each effect's key on a line of its own, then refused signals.

    `shown`: the run's status or memo, whose refused signals (never ledger lines: nothing
    happened) say why a signal sent to the run did nothing.
    """
    if note:
        errors.print(f"[yellow]{escape(note)}[/]")
    print_table(ledger_table(records), wide)
    # sub-agent steps: `waypoint ledger CHILD` shows the child's own ledger
    for title, field in (("effect keys", "effect_key"), ("sub-agent runs", "child_workflow_id")):
        lines = [f"  {r.step_id}  {getattr(r, field)}" for r in records if getattr(r, field)]
        if lines:
            console.print(title)
            for line in lines:
                console.print(escape(line))
    if shown is not None and (shown.ignored_signals or shown.ignored_dropped):
        console.print("refused signals")
        whole = isinstance(shown, RunStatus)
        for line in refusal_lines(shown.ignored_signals, shown.ignored_dropped, whole):
            console.print("  " + line.removeprefix("ignored  ").strip())


def whole_summaries(recent: list[StepRecord], ledger: list[StepRecord]) -> list[StepRecord]:
    """The memo's recent steps with each summary the memo shortened, whole from the ledger."""
    held = {r.step_id: r.summary for r in ledger}
    whole = [held.get(r.step_id, "") for r in recent]
    return [
        r.model_copy(update={"summary": w}) if w.startswith(r.summary) else r
        for r, w in zip(recent, whole, strict=True)
    ]


def status_lines(view: views.RunView) -> list[str]:
    """The run as a few readable lines; hints only for a run that can still act on them."""
    run, s, memo = view.run, view.live, view.memo
    known = s or memo
    model = f"  model {known.model} ({known.provider})" if known and known.model else ""
    lines = [f"run      {run}", f"agent    {view.agent or (s.agent if s else '?')}{model}"]
    detail = known.detail if known and not view.reason else ""
    lines.append(f"state    {styled(view.state)}" + (f"  {detail}" if detail else ""))
    if view.reason:
        lines.append(f"reason   {view.reason}")
    if view.version:
        lines.append(f"version  {view.version}")
    if view.unhosted:
        lines.append(f"waiting  {view.unhosted}")
    if known is not None:
        cost = money(known.cost_usd) + ("" if known.cost_known else " (some steps unpriced)")
        lines.append(f"turn     {known.turn}  tokens {known.total_tokens:,}  cost {cost}")
    if known is not None and not view.closed:
        for p in known.pending_approvals:
            lines.append(f"pending  {p.step_id} {p.tool} {json.dumps(p.arguments)}")
            lines.append(f"         arguments hash {p.arguments_hash}")
            lines.append(f"         approve: waypoint approve {run} {p.step_id}")
        for q in known.pending_questions:
            lines.append(f"question {q.step_id} {q.tool} {json.dumps(q.arguments)}")
            if q.answer_schema is not None:
                lines.append(f"         an answer fits {json.dumps(q.answer_schema)}")
            lines.append(f"         answer: waypoint answer {run} {q.step_id} --json '{{...}}'")
        for u in known.unresolved:
            lines.append(f"unclear  {u.step_id} {u.tool}: {u.reason}")
            lines.append(f"         key {u.effect_key}")
            choices = "--result JSON|--text TEXT|--retry|--abort"
            lines.append(f"         resolve: waypoint resolve {run} {u.step_id} {choices}")
        if view.state in RESUMABLE_STATES:  # what moves it on, from the one state model
            state = STATES[view.state]
            lines.append(f"         {state.means}".replace("RUN", run))
            lines += [f"         {m.does}: {m.cli}".replace("RUN", run) for m in state.moves]
    last_stop = known.last_stop_reason if known else ""
    if last_stop:
        lines.append(f"stopped  {last_stop} (last model step)")
    if known is not None and known.policy:
        lines.append(f"policy   {escape(known.policy)}")
    if known is not None and known.fresh is not None:
        lines.append(f"reads    {known.fresh.counts()}")
        if known.fresh.last:
            lines.append(escape(f"         last {known.fresh.last}"))
    if s is not None:
        if s.plan_version > 1:
            lines.append(f"plan     version {s.plan_version}")
        if s.continues:
            archived = f", {s.steps_archived} earlier steps archived" if s.steps_archived else ""
            lines.append(f"history  {s.continues} continues{archived} (waypoint ledger {run})")
    if known is not None:
        lines.extend(refusal_lines(known.ignored_signals, known.ignored_dropped, bool(s)))
    return lines


def refusal_lines(refused: list[IgnoredSignal], dropped: int, whole: bool) -> list[str]:
    """The latest refused signals with why, and how many came before (`whole`: --json has them)."""
    lines = [escape(f"ignored  {i.signal} {i.step_id}: {i.reason}".rstrip()) for i in refused[-3:]]
    earlier = len(refused) - min(3, len(refused)) + dropped
    if earlier:
        where = " (status --json)" if whole and len(refused) > 3 else ""
        lines.append(f"         and {earlier} earlier ignored signals{where}")
    return lines


def view_json(view: views.RunView) -> dict[str, Any]:
    """The run as `status --json` prints it."""
    source = view.live or view.memo
    return {
        "run": view.run,
        "agent": view.agent,
        "state": view.state,
        "execution": view.execution,
        "reason": view.reason,
        "answered_by": "worker" if view.live else ("memo" if view.memo else "none"),
        "as_of": view.as_of,
        "version": view.version,
        "unhosted": view.unhosted,
        **(source.model_dump(mode="json", exclude={"state"}) if source else {}),
    }


def _print_new(records: list[StepRecord], shown: dict[str, str]) -> None:
    for r in records:
        if r.status != "scheduled" and shown.get(r.step_id) != r.status:
            shown[r.step_id] = r.status
            console.print(step_line(r))


def step_line(r: StepRecord) -> str:
    """One finished or waiting step, as `watch` prints it."""
    style = STATUS_STYLE.get(r.status, "")
    cost = f" {r.tokens:,} tok {money(r.cost_usd)}" if r.kind == "model" else ""
    summary = escape(r.summary.replace("\n", " ")[:60])
    return f"  [{style}]{r.status:>17}[/] {r.step_id}{cost}  {summary}"


Approver = Callable[[PendingApproval], Awaitable[None]]


async def follow(
    client: Client, run: str, on_approval: Approver | None = None, poll: float = 0.25
) -> RunStatus | None:
    """Print steps as they change until the run ends; hand each new approval to `on_approval`."""
    shown: dict[str, str] = {}
    asked: set[str] = set()
    while True:
        view = await views.view(client, run, timeout=runs.QUERY_TIMEOUT)
        status = view.live
        if view.closed:
            if view.execution == "completed":
                _print_new((await runs.handle(client, run).result()).ledger, shown)
            return status
        _print_new(await runs.ledger(client, run) if status else [], shown)
        for p in status.pending_approvals if status else []:
            if p.step_id not in asked:
                asked.add(p.step_id)
                if on_approval is not None:
                    await on_approval(p)
        if status is not None and status.state in FINAL_STATES:
            return status
        await asyncio.sleep(poll)
