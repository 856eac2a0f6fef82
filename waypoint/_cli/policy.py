"""`waypoint policy RUN show|set`: read or change the approval policy of a live run."""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from pydantic import ValidationError

from waypoint._cli import render as out
from waypoint._cli.app import app
from waypoint._cli.common import OPERATOR, Run, client, command, signing_key
from waypoint._cli.decisions import print_sent
from waypoint.client import decisions, views
from waypoint.errors import WaypointError
from waypoint.protocol.policy import ApprovalPolicy


class Action(StrEnum):
    """What to do with the run's policy."""

    show = "show"
    set = "set"


@app.command()
@command
async def policy(
    run: Run,
    action: Annotated[Action, typer.Argument(help="show the policy, or set a new one.")],
    file: Annotated[
        Path | None,
        typer.Option("--file", help="The new policy, as JSON (for set).", metavar="FILE"),
    ] = None,
    reason: Annotated[str, typer.Option(help="Why; recorded in the ledger.")] = "",
    reviewer: Annotated[str, typer.Option(help="Who changes it.")] = OPERATOR,
) -> None:
    """Show or change a live run's approval policy; a change is recorded with who made it."""
    c = await client()
    if action is Action.show:
        view = await decisions.show_policy(c, run, timeout=views.QUICK)
        out.console.print_json(view.model_dump_json())
        return
    if file is None:
        raise WaypointError("set needs --file POLICY.json")
    try:
        new = ApprovalPolicy.model_validate_json(file.read_text())
    except (OSError, ValidationError, json.JSONDecodeError) as err:
        raise WaypointError(f"cannot read a policy from {file}: {err}") from None
    sent = await decisions.set_policy(
        c,
        run,
        new,
        reviewer=reviewer,
        reason=reason,
        timeout=views.QUICK,
        signing_key=signing_key(),
    )
    print_sent(sent, "policy set", f" ({len(new.rules)} rules, sha256 {new.digest()[:12]})")
