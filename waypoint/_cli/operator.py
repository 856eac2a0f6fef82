"""Commands beside the verbs: terminate a run, make a decision key, collect stored blobs."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Annotated

import typer

from waypoint._cli import render as out
from waypoint._cli.app import app
from waypoint._cli.common import Run, client, command, open_run
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
async def terminate(
    run: Run,
    reason: Annotated[str, typer.Option(help="Why; shown in the Web UI.")],
) -> None:
    """Stop a run at once, without cleanup (prefer `cancel`)."""
    c = await client()
    await open_run(c, run, "terminate")
    await runs.handle(c, run).terminate(reason=reason)
    out.console.print(f"terminated {run}: {reason}")


@app.command(name="decision-key")
def decision_key(
    reviewer: Annotated[str, typer.Argument(help="Whose key: the name they decide as.")],
) -> None:
    """Make a key pair for signed decisions: the private key for REVIEWER, the public for workers.

    The reviewer sets WAYPOINT_DECISION_KEY to the first line (and keeps it to themself); the
    workers' WAYPOINT_DECISION_KEYS gets the second. Agents with signed_decisions=True then
    accept REVIEWER's decisions only when signed with that key.
    """
    from waypoint._security.signing import new_key

    private, public = new_key()
    out.console.print(f"WAYPOINT_DECISION_KEY={private}", soft_wrap=True)
    out.console.print(f"{reviewer}:{public}", soft_wrap=True)


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
