"""Commands to hold, stop, branch and tidy runs: pause, unpause, cancel, terminate, fork, gc."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Annotated

import typer

from waypoint._cli import render as out
from waypoint._cli.app import app
from waypoint._cli.common import OPERATOR, Run, client, command, open_run, signing_key
from waypoint._cli.runs import print_started
from waypoint.client import runs
from waypoint.errors import WaypointError
from waypoint.protocol.verbs import VERBS, Verb
from waypoint.settings import Settings

UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_age(text: str) -> timedelta:
    """`7d`, `12h`, `30m`: a retention period."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*", text)
    if not match:
        raise WaypointError(f"--older-than {text!r}: use a number and a unit, e.g. 7d, 12h, 30m")
    return timedelta(**{UNITS[match.group(2)]: float(match.group(1))})


def _simple(verb: Verb) -> None:
    """`waypoint VERB RUN [--reason WHY]`: a verb that takes the run and a reason, from `VERBS`."""
    send = getattr(runs, verb.name)

    async def sends(
        run: Run,
        reason: Annotated[str, typer.Option(help="Why; recorded with it.")] = "",
        reviewer: Annotated[str, typer.Option(help="Who; recorded with it.")] = OPERATOR,
    ) -> None:
        key = signing_key()
        r = await send(await client(), run, reviewer=reviewer, reason=reason, signing_key=key)
        by = f" by {r.decided_by}" + (f" at {r.decided_at}" if r.decided_at else "")
        out.console.print(f"{r.decision} {run}" + (f" ({r.step_id})" if r.step_id else "") + by)
        if not r.recorded:
            out.errors.print(
                "[yellow]no worker answered: sent as a signal; it takes effect when a worker "
                f"picks the run up (see `waypoint status {run}`)[/]"
            )

    sends.__doc__ = f"{verb.does[0].upper()}{verb.does[1:]}."
    app.command(name=verb.command)(command(sends))


for _verb in VERBS.values():
    if _verb.simple:
        _simple(_verb)


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
        reviewer=OPERATOR,
        signing_key=signing_key(),
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
