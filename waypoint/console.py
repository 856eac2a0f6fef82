"""What the CLI prints: ledgers as tables, runs followed live. Rendering only, no decisions."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from rich.console import Console
from rich.table import Table
from temporalio.client import Client

from waypoint import runs
from waypoint.models import PendingApproval, RunStatus, StepRecord

console = Console(highlight=False, soft_wrap=True)
errors = Console(stderr=True, highlight=False, soft_wrap=True)

STATUS_STYLE = {
    "completed": "green",
    "error": "red",
    "rejected": "yellow",
    "awaiting_approval": "magenta",
    "scheduled": "cyan",
    "needs_reconciliation": "bold red",
    "aborted": "red",
}


def money(cost: float | None) -> str:
    """A cost in USD, or a dash when the model's price is unknown."""
    return "-" if cost is None else f"${cost:.4f}"


def ledger_table(records: list[StepRecord]) -> Table:
    """The ledger as a table: one row per step."""
    table = Table(title="ledger", title_justify="left")
    for column in ("step", "status", "attempt", "tokens", "cost"):
        table.add_column(column, no_wrap=True)
    table.add_column("summary", overflow="fold", ratio=2)
    table.add_column("effect key", overflow="fold", ratio=1)
    for r in records:
        style = STATUS_STYLE.get(r.status, "")
        table.add_row(
            r.step_id,
            f"[{style}]{r.status}[/]" if style else r.status,
            str(r.attempt or ""),
            f"{r.tokens:,}" if r.tokens else "",
            money(r.cost_usd) if r.kind == "model" else "",
            r.summary[:70],
            r.effect_key or "",
        )
    return table


def status_lines(run: str, s: RunStatus) -> list[str]:
    """The status of a run as a few readable lines."""
    cost = money(s.cost_usd) + ("" if s.cost_known else " (some steps unpriced)")
    lines = [
        f"run      {run}",
        f"agent    {s.agent}  model {s.model} ({s.provider})",
        f"state    {s.state}" + (f"  {s.detail}" if s.detail else ""),
        f"turn     {s.turn}  tokens {s.total_tokens:,}  cost {cost}",
    ]
    for p in s.pending_approvals:
        lines.append(f"pending  {p.step_id} {p.tool} {p.arguments}")
        lines.append(f"         approve: waypoint approve {run} {p.step_id}")
    for u in s.unresolved:
        lines.append(f"unclear  {u.step_id} {u.tool} key={u.effect_key}: {u.reason}")
        lines.append(
            f"         resolve: waypoint resolve {run} {u.step_id} --result JSON|--retry|--abort"
        )
    if s.state == "model_unavailable":
        lines.append(f"         retry the model step: waypoint resume {run}")
    if s.state == "output_invalid":
        lines.append(f"         give the model more tries: waypoint resume {run}")
    if s.last_stop_reason:
        lines.append(f"stopped  {s.last_stop_reason} (last model step)")
    if s.plan_version > 1:
        lines.append(f"plan     version {s.plan_version}")
    for i in s.ignored_signals[-3:]:
        lines.append(f"ignored  {i.signal} {i.step_id}: {i.reason}")
    return lines


def step_line(r: StepRecord) -> str:
    """One finished or waiting step, as `watch` prints it."""
    style = STATUS_STYLE.get(r.status, "")
    cost = f" {r.tokens:,} tok {money(r.cost_usd)}" if r.kind == "model" else ""
    return f"  [{style}]{r.status:>17}[/] {r.step_id}{cost}  {r.summary[:90]}"


Approver = Callable[[PendingApproval], Awaitable[None]]


async def follow(
    client: Client, run: str, on_approval: Approver | None = None, poll: float = 0.25
) -> RunStatus:
    """Print steps as they change until the run ends; hand each new approval to `on_approval`."""
    shown: dict[str, str] = {}
    asked: set[str] = set()
    while True:
        status = await runs.status(client, run)
        for r in await runs.ledger(client, run):
            if r.status != "scheduled" and shown.get(r.step_id) != r.status:
                shown[r.step_id] = r.status
                console.print(step_line(r))
        for p in status.pending_approvals:
            if p.step_id not in asked:
                asked.add(p.step_id)
                if on_approval is not None:
                    await on_approval(p)
        if status.state in ("done", "refused", "failed", "cancelled"):
            return status
        description = await runs.handle(client, run).describe()
        if description.status is not None and description.status.name != "RUNNING":
            return status
        await asyncio.sleep(poll)
