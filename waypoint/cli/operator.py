"""Commands to stop, branch and tidy runs: cancel, terminate, fork, gc."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Annotated

import typer

from waypoint.cli import render as out
from waypoint.cli.app import app
from waypoint.cli.common import Run, client, command, open_run
from waypoint.cli.runs import print_started
from waypoint.client import runs
from waypoint.errors import WaypointError
from waypoint.settings import Settings

UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_age(text: str) -> timedelta:
    """`7d`, `12h`, `30m`: a retention period."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*", text)
    if not match:
        raise WaypointError(f"--older-than {text!r}: use a number and a unit, e.g. 7d, 12h, 30m")
    return timedelta(**{UNITS[match.group(2)]: float(match.group(1))})


@app.command()
@command
async def cancel(run: Run) -> None:
    """Cancel a run: running steps stop (effects first report what they did); it ends cancelled."""
    c = await client()
    await open_run(c, run, "cancel")
    await runs.handle(c, run).cancel()
    out.console.print(f"cancellation requested for {run}")


@app.command()
@command
async def terminate(
    run: Run,
    reason: Annotated[str, typer.Option(help="Why; shown in the Web UI.")],
) -> None:
    """Stop a run at once, without cleanup (prefer `cancel`)."""
    c = await client()
    await open_run(c, run, "terminate")
    await runs.handle(c, run).terminate(reason=reason)
    out.console.print(f"terminated {run}: {reason}")


@app.command()
@command
async def fork(
    run: Run,
    after_turn: Annotated[
        int, typer.Option(help="Reuse everything up to the end of this turn.", metavar="N")
    ],
    note: Annotated[str | None, typer.Option(help="A note for the model in the new run.")] = None,
    run_id: Annotated[str | None, typer.Option("--id", help="Workflow id of the fork.")] = None,
) -> None:
    """Start a new run from a finished turn of RUN; nothing before that point runs again."""
    settings = Settings.from_env()
    handle = await runs.fork(
        await client(),
        run,
        after_turn,
        task_queue=settings.task_queue,
        note=note,
        workflow_id=run_id,
    )
    print_started(settings, handle.id)


@app.command()
@command
async def gc(
    older_than: Annotated[
        str, typer.Option(help="Keep blobs younger than this (e.g. 7d, 12h).")
    ] = "7d",
) -> None:
    """Delete stored payload and transcript blobs that no open run references."""
    from waypoint.settings import payload_store, transcript_store
    from waypoint.stores.gc import collect_garbage

    age = parse_age(older_than)
    settings = Settings.from_env()
    results = await collect_garbage(
        await client(), payload_store(settings), transcript_store(settings), age
    )
    for store, r in results.items():
        out.console.print(
            f"{store}: deleted {r.deleted} ({r.freed_bytes:,} bytes), "
            f"kept {r.kept} ({r.kept_bytes:,} bytes)"
        )
    if not results:
        out.console.print("no stores to collect (WAYPOINT_PAYLOAD_STORE=off)")
