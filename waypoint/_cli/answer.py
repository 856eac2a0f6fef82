"""`waypoint answer`: give a client-answered tool call its result.

With a worker up this is an Update: the run records the answer, or refuses it with the reason
(unknown step, nothing waiting, a result that does not fit the tool's output type). With none,
it is checked against the run's memo and sent as a signal, taken up when a worker returns.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from waypoint._cli.app import app
from waypoint._cli.common import OPERATOR, Run, client, command, signing_key
from waypoint._cli.decisions import print_sent
from waypoint.client import runs, views
from waypoint.errors import WaypointError


def _result(text: str | None, file: Path | None) -> dict[str, Any]:
    """The answer as a JSON object, from `--json` or `--file` (exactly one)."""
    if (text is None) == (file is None):
        raise WaypointError("give exactly one of --json '{...}' or --file PATH")
    if file is not None:
        try:
            text = file.read_text(encoding="utf-8")
        except OSError as err:
            raise WaypointError(f"cannot read {file}: {err.strerror}") from None
    try:
        value = json.loads(text or "")
    except ValueError as err:
        raise WaypointError(f"the answer must be JSON ({err})") from None
    if not isinstance(value, dict):
        raise WaypointError("the answer must be a JSON object, the tool's output type")
    return value


@app.command()
@command
async def answer(
    run: Run,
    step: Annotated[str, typer.Argument(help="The step awaiting an answer, e.g. t2.tool.1.ask.")],
    json_text: Annotated[
        str | None, typer.Option("--json", help="The answer, a JSON object.", metavar="JSON")
    ] = None,
    file: Annotated[
        Path | None,
        typer.Option("--file", help="Read the answer from a JSON file.", metavar="FILE"),
    ] = None,
    reviewer: Annotated[
        str, typer.Option("--reviewer", "--sender", help="Who answers.", metavar="NAME")
    ] = OPERATOR,
) -> None:
    """Answer a tool call the run is waiting on a client for."""
    result = _result(json_text, file)
    key, c = signing_key(), await client()
    sent = await runs.answer(
        c, run, step, result, reviewer=reviewer, timeout=views.QUICK, signing_key=key
    )
    print_sent(sent, "answered", "")
