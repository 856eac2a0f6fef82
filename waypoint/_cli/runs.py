"""Commands that start and read runs: start, list, status, ledger, result, watch, inspect.

Every read starts from what Temporal records (describe, the memo, the closing event), so an
ended run shows as ended, and a run answers with no worker up.
"""

from __future__ import annotations

import asyncio
import time
from datetime import datetime, timedelta
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from pydantic import ValidationError
from rich.markup import escape
from temporalio.client import Client, WorkflowFailureError

from waypoint._cli import render as out
from waypoint._cli.app import app
from waypoint._cli.common import AsJson, Run, Wide, client, command, fail, opt
from waypoint._cli.watch import ended as print_ended
from waypoint._cli.watch import stream_answers
from waypoint._cli.watch import watch as follow_events
from waypoint._content import attachment
from waypoint._operations import ui
from waypoint.client import detail, listing, paging, runs, views
from waypoint.errors import ContentError, WaypointError
from waypoint.protocol import HistoryOverride, LimitsOverride, StepOptions
from waypoint.protocol.states import CALL_STATES
from waypoint.settings import Settings, connect_config, ui_link

AWAITING = listing.query(states=CALL_STATES, running=True)
"""Runs in which a tool call waits for a person (`waypoint list --ui`)."""


class DurabilityChoice(StrEnum):
    """`--durability`: how a run's pure and read calls are saved (`Agent.durability`)."""

    step = "step"
    turn = "turn"


def print_started(settings: Settings, run: str) -> None:
    """The id of a run just started and its Web UI link."""
    out.console.print(f"started {run}")
    out.console.print(f"web ui  {ui_link(settings, run)}")


async def confirm_started(client: Client, run: str, task_queue: str, wait: float) -> str:
    """Wait until a worker has loaded the run's agent; a warning if none has yet.

    An agent no worker hosts is refused before the start (`waypoint.client.hosts`); one
    started with --queue-anyway waits for a worker (`views.unhosted_line`) and the warning
    says so, with no agent code in this process. A run
    that completes before the first look has started fine: a script must not start it again.

    Raises:
        WaypointError: The run ended at once without completing (unknown agent, no model
            configured, ...).
    """
    if not await views.has_pollers(client, task_queue):
        return (
            f"no worker polls queue {task_queue!r} yet: the run starts when one does "
            "(`waypoint worker`)"
        )
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        view = await views.view(client, run, ask_worker=False)
        if view.closed and view.execution != "completed":
            raise WaypointError(f"run {run} {view.execution} at start: {view.reason}")
        if view.unhosted:
            # No worker takes its tasks, so only terminate (which needs none) ends it.
            drop = f"`waypoint terminate {run} --reason misspelt`"
            return f"{view.unhosted}; a misspelt name? {drop} drops the run"
        if view.memo is not None or view.closed:
            return ""
        await asyncio.sleep(0.2)
    return f"no worker has picked the run up within {wait:g}s; see `waypoint status {run}`"


@app.command()
@command
async def start(
    agent: Annotated[str, typer.Argument(help="The agent's name.")],
    task: Annotated[str, typer.Argument(help="What the agent should do.")],
    run_id: Annotated[str | None, typer.Option("--id", help="Workflow id to use.")] = None,
    rerun: Annotated[
        bool,
        typer.Option(
            "--rerun",
            help="Allow the --id of a run that already ran: its work is done again, "
            "under new effect keys.",
        ),
    ] = False,
    max_turns: Annotated[
        int | None, opt("Max turns for this run (the agent's other limits stay).", "N", min=1)
    ] = None,
    attach: Annotated[
        list[Path] | None,
        typer.Option(
            "--attach", help="An image or PDF sent with the task (repeatable).", metavar="FILE"
        ),
    ] = None,
    queue_anyway: Annotated[
        bool,
        typer.Option(
            "--queue-anyway",
            help="Start even if no worker on the queue hosts the agent (one still being "
            "deployed): the run waits for one.",
        ),
    ] = False,
    check: Annotated[
        float,
        opt(
            "Seconds to wait for a worker when none polls the queue yet, and for one to "
            "accept the agent (0: don't).",
            "SECONDS",
        ),
    ] = 15.0,
    tool_timeout: Annotated[
        float | None, opt("Seconds one tool call may take (a tool's own timeout wins).", "SECONDS")
    ] = None,
    tool_attempts: Annotated[
        int | None, opt("Tries of a failing tool (a tool's own max_attempts wins).", "N")
    ] = None,
    model_attempts: Annotated[
        int | None, opt("Tries of a failing model call before the run parks.", "N")
    ] = None,
    history_events: Annotated[
        int | None, opt("Continue-as-new once a history segment holds this many events.", "N")
    ] = None,
    history_bytes: Annotated[
        int | None, opt("Continue-as-new once a history segment holds this many bytes.", "N")
    ] = None,
    keep_turns: Annotated[
        int | None, opt("Turns a continued run keeps verbatim (older ones are summarised).", "N")
    ] = None,
    durability: Annotated[
        DurabilityChoice | None,
        opt(
            "step: every call saved before the next; turn: a reply's pure and read calls "
            "saved together (faster; a crash may read them again). Default: the agent's."
        ),
    ] = None,
) -> None:
    """Start a run; prints its id and Web UI link once a worker has accepted the agent.

    An agent no worker on the queue hosts is refused, naming those hosted, unless
    --queue-anyway.
    """
    try:
        attachments = [attachment(path) for path in attach or ()]
    except ContentError as err:
        raise fail(f"--attach {err}", 2) from None
    flags = {
        "max_events": ("--history-events", history_events),
        "max_bytes": ("--history-bytes", history_bytes),
        "keep_recent_turns": ("--keep-turns", keep_turns),
    }
    budget = {field: value for field, (_, value) in flags.items() if value is not None}
    try:  # the flags not given keep the agent's budget
        history = HistoryOverride(**budget) if budget else None
    except ValidationError as err:
        problem = err.errors()[0]
        flag = flags[str(problem["loc"][0])][0]
        raise fail(f"{flag}: {problem['msg']} (the run's history budget)", 2) from None
    settings = Settings.from_env()
    c = await client()
    steps = {
        "tool_timeout": None if tool_timeout is None else timedelta(seconds=tool_timeout),
        "tool_max_attempts": tool_attempts,
        "model_max_attempts": model_attempts,
    }
    handle = await runs.start_run(
        c,
        agent,
        task,
        task_queue=settings.task_queue,
        workflow_id=run_id,
        limits=LimitsOverride(max_turns=max_turns) if max_turns else None,
        options=StepOptions(**{step: v for step, v in steps.items() if v is not None}),
        history=history,
        attachments=attachments,
        rerun=rerun,
        queue_anyway=queue_anyway,
        worker_wait=check,
        durability=durability.value if durability else None,
    )
    warning = await confirm_started(c, handle.id, settings.task_queue, check) if check else ""
    print_started(settings, handle.id)
    if warning:
        out.errors.print(f"[yellow]warning:[/] {warning}")


@app.command("list")
@command
async def list_runs(
    limit: Annotated[int, opt("How many runs to show (a page).", "N", min=1, max=1000)] = 20,
    run: Annotated[str, opt("Runs whose id starts with this.", "PREFIX")] = "",
    agent: Annotated[str, opt("Runs of this agent.", "AGENT")] = "",
    state: Annotated[str, opt("Runs in this state (docs/stuck.md lists them).", "STATE")] = "",
    waiting: Annotated[
        str, opt("Runs waiting on: approval, approver, operator, anyone (oldest first).", "ON")
    ] = "",
    started_from: Annotated[str, opt("Started on or after (a date or ISO time).", "WHEN")] = "",
    started_to: Annotated[str, opt("Started by (a date: through its end).", "WHEN")] = "",
    closed_from: Annotated[str, opt("Closed on or after.", "WHEN")] = "",
    closed_to: Annotated[str, opt("Closed by.", "WHEN")] = "",
    page: Annotated[str, opt("The next page's token, as the last page printed it.", "TOKEN")] = "",
    web_ui: Annotated[
        bool, typer.Option("--ui", help="Print a Web UI link to the runs awaiting a decision.")
    ] = False,
    as_json: AsJson = False,
    wide: Wide = False,
) -> None:
    """List Waypoint runs with their true state, a page at a time, and how many match.

    Newest first; runs that wait (--waiting), the longest wait first.
    """
    if web_ui:
        config = connect_config()
        base = ui.ui_base(config["target_host"], Settings.from_env().ui_url)
        out.console.print(ui.list_link(base, config.get("namespace", "default"), AWAITING))
        return
    given = (run, agent, state, waiting, started_from, started_to, closed_from, closed_to)
    search = listing.Search(**dict(zip(listing.Search.model_fields, given, strict=True)))
    try:
        query = listing.query(search=search)
        found = await paging.page(
            await client(), query, size=limit, token=page, waiting=search.waits
        )
    except ValueError as err:
        raise fail(str(err)) from None
    rows = [
        {
            "run": r.run,
            "run_id": r.run_id,
            "agent": r.agent,
            "state": r.state,
            "execution": r.execution,
            "turns": r.turn,
            "cost_usd": r.cost_usd,
            "started": r.started_at,
        }
        for r in found.runs
    ]
    if found.runs:
        shown = f"{found.first + 1}-{found.first + len(rows)} of {found.total}"
        more = f"; next page: --page {found.next_page}" if found.next_page else ""
        out.errors.print(f"runs {shown}{more}", soft_wrap=True, highlight=False)
    if as_json:
        out.print_json(rows)
        return
    if not rows:
        out.console.print("no runs yet: try `waypoint demo`")
        return
    table = [
        [
            escape(r["run"]),
            escape(r["agent"]),
            out.styled(r["state"]),
            str(r["turns"]),
            out.money(r["cost_usd"]),
            datetime.fromisoformat(r["started"]).astimezone().strftime("%m-%d %H:%M"),
        ]
        for r in rows
    ]
    columns = ["run", "agent", "state", "turns", "cost", "started"]
    out.print_table(out.table(columns, table, elastic="agent"), wide)


@app.command()
@command
async def status(run: Run, as_json: AsJson = False) -> None:
    """Show a run's state, what it waits for, tokens and cost (works with no worker up)."""
    c = await client()
    view = await views.view(c, run)
    if as_json:
        shown = out.view_json(view)
        recent = view.memo.last_steps if view.memo and not view.live else []
        own = await detail.ledger(c, view) if recent else None
        if own is not None and own.whole:  # the memo keeps short summaries, the ledger whole
            steps = out.whole_summaries(recent, own.steps)
            shown["last_steps"] = [r.model_dump(mode="json") for r in steps]
        out.print_json(shown)
        return
    if view.fallback_note:
        out.errors.print(f"[yellow]{view.fallback_note}[/]")
    for line in out.status_lines(view):
        out.console.print(line)


@app.command()
@command
async def ledger(run: Run, as_json: AsJson = False, wide: Wide = False) -> None:
    """Show every step of a run as a table (the recent ones when no worker answers)."""
    c = await client()
    view = await views.view(c, run)
    read = await detail.ledger(c, view)
    if as_json:
        out.print_json([r.model_dump(mode="json") for r in read.steps])
        if read.note:
            out.errors.print(f"[yellow]{escape(read.note)}[/]")
        return
    out.print_ledger(read.steps, read.note, wide, view.live or view.memo)


@app.command()
@command
async def result(
    run: Run,
    wait: Annotated[bool, opt("Wait for the run to finish.")] = True,
    as_json: AsJson = False,
) -> None:
    """Print a run's final output (waits for it to finish unless --no-wait)."""
    c = await client()
    view = await views.view(c, run, ask_worker=False)
    if view.closed and view.execution != "completed":
        raise WaypointError(f"run {run} {view.execution}: {view.reason or 'no reason recorded'}")
    if not view.closed and not wait:
        raise WaypointError(f"run {run} is still running (see `waypoint status {run}`)")
    try:
        final = await runs.handle(c, run).result()
    except WorkflowFailureError:
        view = await views.view(c, run, ask_worker=False)
        raise WaypointError(f"run {run} {view.execution}: {view.reason}") from None
    if as_json:  # the typed value when the agent has an output_type, else the whole result
        typed = final.output_json
        out.print_json(typed if typed is not None else final.model_dump(mode="json"))
        return
    out.console.print(final.output)
    out.console.print(
        f"[dim]{final.state}: {final.stop_reason} after {final.turns} turns, "
        f"{final.total_tokens:,} tokens, {out.money(final.cost_usd)}[/]"
    )


@app.command()
@command
async def inspect(run: Run) -> None:
    """Print the run's whole state as JSON: spec, transcript, ledger, waits, counters."""
    c = await client()
    await views.describe(c, run)
    out.print_json((await runs.state(c, run)).model_dump(mode="json"))


@app.command()
@command
async def watch(run: Run, as_json: AsJson = False) -> None:
    """Follow a run live: steps, approvals and Claude's words as they happen (no polling).

    A run that has ended and that no worker answers for prints its steps and its end, read
    from history; the exit code is 0 if it completed.
    """
    c = await client()
    view = await views.view(c, run, ask_worker=False)
    if view.closed and not await stream_answers(c, view):
        await print_ended(c, view, as_json)
        return
    await follow_events(c, run, as_json)
