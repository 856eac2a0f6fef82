"""`waypoint watch RUN`: the run's event stream rendered as it happens, no polling.

Steps and approvals print as lines; Claude's words print as they arrive, under the step that is
writing them. With `--json`, every event is one line of JSON
(`waypoint.protocol.events.run_event` parses it back). A run that has ended is read from its
history instead when no worker answers for it: its stream is read through a worker.
"""

from __future__ import annotations

import contextlib
import json
import sys

from rich.markup import escape
from temporalio.client import Client

from waypoint._cli.render import STATUS_STYLE, console, money, step_line
from waypoint.client import runs, views
from waypoint.client.events import events, json_line
from waypoint.errors import RunClosedError, RunStuckError
from waypoint.protocol.events import (
    ApprovalDecided,
    ApprovalRequested,
    RunEnded,
    RunEvent,
    StateChanged,
    Steered,
    StepCompleted,
    StepFailed,
    StepScheduled,
    StepStarted,
    TextDelta,
)


async def watch(client: Client, run: str, json_lines: bool = False, from_offset: int = 0) -> None:
    """Follow `run` until it ends: readable lines, or one JSON event per line."""
    view = _View(run)
    async for event in events(client, run, from_offset):
        if json_lines:
            sys.stdout.write(json_line(event) + "\n")
            sys.stdout.flush()
        else:
            view.show(event)
    view.end_text()


async def stream_answers(client: Client, run: views.RunView) -> bool:
    """Whether a worker answers for the run, so its whole stream can be read, not just its end.

    Only a completed run's stream ends (with `RunEnded`); asked without a poller, a query
    waits out its whole timeout, so the queue is checked first.
    """
    if run.execution != "completed":
        return False
    if not await views.has_pollers(client, run.task_queue):
        return False
    with contextlib.suppress(RunStuckError):
        return await views.live_status(client, run.run, views.QUICK) is not None
    return False


async def ended(client: Client, run: views.RunView, json_lines: bool = False) -> None:
    """How a run that has ended ended, from its history: its steps, then its end.

    Raises:
        RunClosedError: The run did not complete (failed, cancelled, terminated, timed out).
    """
    if run.execution != "completed":
        raise RunClosedError(f"run {run.run} {run.execution}: {run.reason or 'no reason recorded'}")
    final = await runs.handle(client, run.run).result()
    # The stream's last two events, as a live reader sees them end.
    last: list[RunEvent] = [
        StateChanged(state=final.state),
        RunEnded.of(final),
    ]
    if json_lines:
        sys.stdout.write("".join(json_line(event) + "\n" for event in last))
        return
    for record in final.ledger:
        console.print(step_line(record))
    view = _View(run.run)
    for event in last:
        view.show(event)


class _View:
    """Remembers which step is writing, so streamed text and step lines do not interleave."""

    def __init__(self, run: str) -> None:
        self.run = run
        self.writing: tuple[str, int, str] | None = None
        self.streamed: set[str] = set()

    def end_text(self) -> None:
        if self.writing is not None:
            sys.stdout.write("\n")
            sys.stdout.flush()
            self.writing = None

    def show(self, event: RunEvent) -> None:
        if isinstance(event, TextDelta):
            self._text(event)
            return
        self.end_text()
        if isinstance(event, StepScheduled):
            label = event.tool or event.kind
            console.print(f"  [cyan]{'scheduled':>17}[/] {event.step_id}  {label}")
        elif isinstance(event, StepStarted):
            if event.attempt > 1:
                console.print(f"  [yellow]{'retrying':>17}[/] {event.step_id} try {event.attempt}")
        elif isinstance(event, StepCompleted):
            cost = f" {event.tokens:,} tok {money(event.cost_usd)}" if event.kind == "model" else ""
            if event.text and event.step_id not in self.streamed:
                console.print(f"  {escape(event.text)}", style="italic")
            summary = escape(event.summary[:90])
            console.print(f"  [green]{'completed':>17}[/] {event.step_id}{cost}  {summary}")
        elif isinstance(event, StepFailed):
            style = STATUS_STYLE.get(event.status, "red")
            summary = escape(event.summary[:90])
            console.print(f"  [{style}]{event.status:>17}[/] {event.step_id}  {summary}")
        elif isinstance(event, ApprovalRequested):
            console.print(
                f"  [magenta]{'needs approval':>17}[/] {event.step_id} "
                f"{escape(json.dumps(event.arguments))}\n"
                f"{'':>20}approve: waypoint approve {self.run} {event.step_id}"
            )
        elif isinstance(event, ApprovalDecided):
            verdict = event.decision or ("approved" if event.approved else "rejected")
            console.print(f"  [magenta]{verdict:>17}[/] {event.step_id} by {event.decided_by}")
        elif isinstance(event, Steered):
            console.print(
                f"  [bold magenta]{'steered':>17}[/] {event.step_id} by {event.decided_by} "
                f"at {event.decided_at}\n{'':>20}{escape(event.summary)}"
            )
        elif isinstance(event, StateChanged):
            detail = f"  {escape(event.detail)}" if event.detail else ""
            style = "bold yellow" if event.parked else "dim"
            console.print(f"  [{style}]{'state':>17}[/] {event.state}{detail}")
        elif isinstance(event, RunEnded):
            console.print(
                f"  [bold]{'ended':>17}[/] {event.state}: {event.turns} turns, "
                f"{event.total_tokens:,} tokens, {money(event.cost_usd)}"
            )

    def _text(self, delta: TextDelta) -> None:
        key = (delta.step_id, delta.attempt, delta.kind)
        if delta.final:
            return
        if self.writing != key:
            self.end_text()
            self.writing = key
            self.streamed.add(delta.step_id)
            sys.stdout.write("  " if delta.kind == "text" else "  (thinking) ")
        sys.stdout.write(delta.text)
        sys.stdout.flush()
