"""The run-state model is whole and true: every state in it, every move a real command, route
and button, and the "A run is stuck" page rendered from it.

`python tests/test_states.py` rewrites `docs/stuck.md` after a change to the model.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
from pathlib import Path
from typing import get_args

import httpx
import typer
from fastapi.routing import APIRoute
from temporalio.client import Client

from tests.agents import PAY_SCRIPT, Payments, build_agent, long_script
from tests.cli import waypoint
from tests.conftest import (
    running_worker,
    start_continuing,
    the_pending_approval,
    wait_for_visibility,
)
from tests.test_cli import cli_env  # noqa: F401 - the fixture is used by name
from tests.test_console import make_console
from waypoint._cli import app
from waypoint._console import api
from waypoint._console.app import build_app
from waypoint.client import listing, runs
from waypoint.protocol.base import RunState, StepStatus
from waypoint.protocol.states import CANCEL, STATES, STEP_FINAL, STEP_WAITING, Move, shown_state
from waypoint.protocol.verbs import VERBS

ROOT = Path(__file__).parent.parent
PAGE = ROOT / "docs" / "stuck.md"
RUN_PAGE = ROOT / "waypoint" / "_console" / "templates" / "run.html"
API = "POST /api/runs/{run}/"
HEADINGS = {
    "stuck": "Stuck: only an operator moves it",
    "waiting": "Waiting for a person, as designed",
    "moving": "Moving",
    "ended": "Ended: its result is final",
    "closed": "Closed by Temporal",
}


def test_every_run_state_is_in_the_model() -> None:
    assert list(STATES) == list(get_args(RunState))


def test_every_step_status_is_waiting_or_final() -> None:
    assert STEP_WAITING | STEP_FINAL == set(get_args(StepStatus))
    assert not STEP_WAITING & STEP_FINAL


def test_every_state_has_a_way_on_and_every_way_exists() -> None:
    """Each move's CLI command and options, API route and page button are real ones."""
    cli = typer.main.get_group(app)
    routes = {r.path for r in api.router.routes if isinstance(r, APIRoute) and "POST" in r.methods}
    pages = [RUN_PAGE, *RUN_PAGE.parent.glob("run/*.html")]  # the page and its partials
    buttons = {b for p in pages for b in re.findall(r">([^<>]+)</button>", p.read_text())}
    buttons |= {f"{v.name.capitalize()} run" for v in VERBS.values() if v.simple}  # made from
    moves = [(name, move) for name, state in STATES.items() for move in state.moves]
    assert {name for name, _ in moves} == set(STATES)
    for name, move in [*moves, ("any", CANCEL)]:
        for command in move.cli.split("; "):
            words = command.split()
            assert words[0] == "waypoint" and words[1] in cli.commands, (name, command)
            options = {o for p in cli.commands[words[1]].params for o in p.opts}
            for option in re.findall(r"--[a-z-]+", command):
                assert option in options, (name, command, option)
        if move.api:
            assert f"/api/runs/{{run}}/{move.api.split()[0]}" in routes, (name, move.api)
        if move.page:
            assert move.page in buttons, (name, move.page)


def test_a_closed_run_shows_how_temporal_closed_it() -> None:
    assert shown_state("running", "limit_reached") == "limit_reached"
    assert shown_state("completed", "refused") == "refused"
    assert shown_state("completed", "running") == "done"  # continued-as-new, then completed
    assert shown_state("terminated", "awaiting_approval") == "terminated"


async def test_the_cli_and_the_console_list_the_same_states_a_continued_run_once(
    client: Client,
    task_queue: str,
    tmp_path: Path,
    cli_env: dict[str, str],  # noqa: F811
) -> None:
    """`waypoint list` and the console list runs through `listing`: one row a run, by its
    latest execution (the CLI once listed every segment a run had continued as new from), in
    the same state as each other, read from the memo with no worker up."""
    long = build_agent(Payments(tmp_path / "p.db"), long_script(8, pay_every=1000))
    gated = build_agent(Payments(tmp_path / "q.db"), PAY_SCRIPT, name="gated", approval=True)
    async with running_worker(client, [long, gated], task_queue):
        handle = await start_continuing(client, f"listed-{task_queue}", task_queue)
        waits = await runs.start_run(client, "gated", "pay ada 5", task_queue=task_queue)
        await the_pending_approval(client, waits.id)
        await handle.result()
    run = f"WorkflowId = '{handle.id}'"
    await wait_for_visibility(client, f"{run} AND ExecutionStatus = 'Completed'", 1)
    assert (await client.count_workflows(f"{run} AND ExecutionStatus = 'ContinuedAsNew'")).count
    rows = await listing.list_runs(client, listing.where(run))
    assert [(r.run, r.state, r.execution) for r in rows] == [(handle.id, "done", "completed")]
    assert rows[0].run_id == (await handle.describe()).run_id and rows[0].turn == 8
    ours = {handle.id: "done", waits.id: "awaiting_approval"}
    both = f"WorkflowId IN ('{handle.id}', '{waits.id}')"
    await wait_for_visibility(client, listing.where(both, "WaypointStatus != 'starting'"), 2)
    listed = await asyncio.to_thread(waypoint, cli_env, "list", "--json", "--limit", "1000")
    assert listed.returncode == 0, listed.stderr
    by_cli = [(r["run"], r["state"]) for r in json.loads(listed.stdout) if r["run"] in ours]
    console = make_console(client, tmp_path, task_queue)
    transport = httpx.ASGITransport(app=build_app(console))
    async with httpx.AsyncClient(transport=transport, base_url="http://console") as http:
        shown = await http.get(
            "/api/runs?limit=1000", headers={"Authorization": "Bearer wpt_ops-token"}
        )
    by_console = [(r["run"], r["state"]) for r in shown.json()["runs"] if r["run"] in ours]
    assert sorted(by_cli) == sorted(by_console) == sorted(ours.items())


def test_the_stuck_page_is_rendered_from_the_model() -> None:
    assert PAGE.read_text() == page(), "run `python tests/test_states.py` to render it again"


def page() -> str:
    """`docs/stuck.md`: state -> what it means -> what moves it, by kind of wait."""
    lines = [
        "# A run is stuck",
        "",
        "`waypoint status RUN` (or the run's page in the console) says which state a run is in",
        "and what it waits for. Find the state below: what it means, and the CLI command, the",
        "console page's button or the console API call that moves it on. `RUN` is the run's id,",
        "`STEP` the step it names. Every state is defined once, in `waypoint.protocol.states`,",
        "and this page is rendered from it (a test holds the two equal).",
    ]
    for kind, heading in HEADINGS.items():
        lines += ["", f"## {heading}", ""]
        lines += [_HEAD, "|---" * 6 + "|"]
        for name, state in STATES.items():
            if state.kind != kind:
                continue
            for i, move in enumerate(state.moves):
                lines.append(_row([f"`{name}`", state.means] if i == 0 else ["", ""], move))
    lines += [
        "",
        "## Any run not over",
        "",
        _HEAD,
        "|---" * 6 + "|",
        _row(["any", "not ended, nor closed"], CANCEL),
    ]
    return "\n".join(lines) + "\n"


_HEAD = "| state | what it means | what moves it | CLI | page | API |"


def _row(first: list[str], move: Move) -> str:
    cells = [*first, move.does, _code(move.cli), move.page, _code(move.api and API + move.api)]
    return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"


def _code(text: str) -> str:
    return " then ".join(f"`{part}`" for part in text.split("; ")) if text else ""


if __name__ == "__main__":
    PAGE.write_text(page())
    sys.exit(0)
