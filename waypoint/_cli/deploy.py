"""`waypoint deploy check / show / set-current / ramp`: route new runs, check the ones in flight.

`check` (`waypoint._operations.deploy_check`) says which runs in flight a build breaks, parks or
replans; `set-current` and `ramp` run it first.

The same with the `temporal` CLI: `temporal worker deployment describe --name NAME`,
`set-current-version --deployment-name NAME --build-id BUILD`, and `set-ramping-version
--deployment-name NAME --build-id BUILD --percentage N`.
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import TYPE_CHECKING, Annotated

import typer

from waypoint._cli import render as out
from waypoint._cli.app import app
from waypoint._cli.common import AsJson, client, command, fail, one_line, opt
from waypoint._operations import deploys
from waypoint.errors import AgentNotFoundError
from waypoint.settings import Settings

if TYPE_CHECKING:
    from waypoint._operations.deploy_check import DeployReport, RunCheck

deploy = typer.Typer(
    help="Route new runs between worker builds; running runs stay on theirs.", no_args_is_help=True
)
app.add_typer(deploy, name="deploy")

Build = Annotated[str, typer.Argument(help="The build id, as the worker's WAYPOINT_BUILD_ID.")]
Deployment = Annotated[
    str | None, opt("The worker deployment; WAYPOINT_DEPLOYMENT by default.", "NAME")
]


App = Annotated[
    str | None,
    typer.Option(
        "--app", help="The new build's agents, module:attribute; WAYPOINT_APP by default."
    ),
]
Force = Annotated[
    bool, typer.Option("--force", help="Route runs even if `deploy check` finds one it breaks.")
]


def _name(deployment: str | None) -> str:
    name = deployment or os.environ.get("WAYPOINT_DEPLOYMENT")
    if not name:
        raise fail("name the deployment with --deployment or WAYPOINT_DEPLOYMENT")
    return name


@deploy.command()
@command
async def show(deployment: Deployment = None, as_json: AsJson = False) -> None:
    """Show the deployment's builds, the current one and any ramp."""
    connected = await client()
    routing = await deploys.routing(connected, _name(deployment))
    if as_json:
        out.print_json(vars(routing) | {"builds": list(routing.builds)})
        return
    out.console.print(f"deployment {routing.deployment}")
    out.console.print(f"current    {routing.current or '(none: unversioned workers)'}")
    if routing.ramping:
        out.console.print(f"ramping    {routing.ramping} at {routing.ramp_percent:g}%")
    out.console.print(f"builds     {', '.join(routing.builds) or '(none yet)'}")
    if routing.propagating and await deploys.queues_route(connected, routing):
        out.console.print(
            "routing    every task queue routes by the last change (the deployment still says "
            "propagating: a flag the server can leave set, temporalio/temporal#11842)"
        )
    elif routing.propagating:
        out.console.print("routing    propagating: some task queues still route by the last change")


@deploy.command()
@command
async def check(
    app_path: App = None,
    agent: Annotated[str | None, opt("Only this agent's runs.")] = None,
    query: Annotated[
        str | None, opt("A further visibility filter (Temporal's list syntax).")
    ] = None,
    sample: Annotated[int | None, opt("Check at most N runs.", "N")] = None,
    closed_hours: Annotated[float, opt("Replay runs closed within this many hours too.", "H")] = 24,
    as_json: AsJson = False,
) -> None:
    """Replay open and recent runs against this build; say which it breaks, parks or replans.

    Exits 1 when an open run would stop making progress on this build (non-determinism).
    """
    report = await _check(app_path, agent, query, sample, closed_hours)
    if as_json:
        out.print_json(
            {"ok": report.ok, "counts": report.counts(), "runs": [vars(r) for r in report.runs]}
        )
    else:
        _print(report)
    if not report.ok:
        raise typer.Exit(1)


async def _check(
    app_path: str | None,
    agent: str | None = None,
    query: str | None = None,
    sample: int | None = None,
    closed_hours: float = 24,
) -> DeployReport:
    from waypoint._operations.deploy_check import check_deploy  # the agents' imports, here only
    from waypoint._worker import load_agents

    agents = load_agents(app_path or Settings.from_env().app)
    checked: list[str] = []

    def progress(run: RunCheck) -> None:  # on stderr: --json output stays clean
        checked.append(run.run_id)
        if len(checked) % 50 == 0:
            out.errors.print(f"checked {len(checked)} runs...")

    return await check_deploy(
        await client(),
        agents,
        agent=agent,
        query=query,
        sample=sample,
        closed_within=timedelta(hours=closed_hours),
        progress=progress,
    )


def _print(report: DeployReport) -> None:
    counts = report.counts()
    shown = {"nondeterministic": "non-determ.", "replay_failed": "replay fail"}
    columns = [shown.get(k, k.replace("_", " ").removeprefix("would ")) for k in counts]
    out.console.print(out.table(columns, [[str(n) for n in counts.values()]]))
    for r in report.runs:
        where = f" (pinned to {r.pinned}: the deploy does not touch it)" if r.pinned else ""
        state = "open" if r.open else "closed"
        if r.replay != "ok":
            at = f" at event {r.event_id}" if r.event_id else ""
            step = f", step {r.step}" if r.step else ""
            what = "non-deterministic" if r.replay == "nondeterministic" else "replay failed"
            out.console.print(f"[red]{what}[/] {r.run_id} ({state}){at}{step}{where}")
            out.console.print(f"  {r.error[:400]}", soft_wrap=True)
        if not r.open:  # no next step: only whether its history replays matters
            pass
        elif r.change in ("refuse", "replan", "unknown"):
            verb = {
                "refuse": "parks in tool_changed at its next call (on_change='refuse')",
                "replan": "replans at its next call (on_change='replan'): new tools, nothing else",
                "unknown": "has no agent in this build",
            }[r.change]
            out.console.print(f"[yellow]{r.run_id}[/] ({state}) {verb}{where}")
        elif r.change == "continue":
            out.console.print(f"{r.run_id} ({state}) continues on the spec it started with")
        for d in r.differences if r.open else []:
            out.console.print(f"  {d}", soft_wrap=True)
        if r.parked:
            out.console.print(
                f"  parked in tool_changed now: roll back and `waypoint resume {r.run_id}`, "
                f"or `waypoint resume {r.run_id} --replan`",
                soft_wrap=True,
            )
    verdict = "ok: no open run breaks" if report.ok else "FAILED: open runs break on this build"
    out.console.print(verdict)


async def _checked(app_path: str | None, deployment: str, force: bool) -> None:
    """`deploy check` of the deployment's runs before routing; a break stops it unless forced."""
    from waypoint._operations.deploy_check import quoted

    scope = f"TemporalWorkerDeployment = '{quoted(deployment)}'"
    try:
        report = await _check(app_path, query=scope)
    except AgentNotFoundError as err:
        if not force:
            raise AgentNotFoundError(
                f"{err}; `deploy check` runs first and needs the new build's agents "
                "(--app or WAYPOINT_APP), or --force to route without it"
            ) from err
        out.errors.print(f"[yellow]warning:[/] deploy check skipped (--force): {err}")
        return
    except Exception as err:  # the server's visibility, say: --force routes all the same
        if not force:
            raise
        out.errors.print(f"[yellow]warning:[/] deploy check failed (--force): {one_line(err)}")
        return
    if report.ok:
        return
    _print(report)
    if not force:
        raise fail(
            "deploy check found open runs this build breaks (above); --force to route anyway"
        )
    out.errors.print("[yellow]warning:[/] routing anyway (--force)")


@deploy.command("set-current")
@command
async def set_current(
    build: Build, deployment: Deployment = None, app_path: App = None, force: Force = False
) -> None:
    """Send new runs to BUILD; pinned runs finish on the build they started on.

    Runs `deploy check` with this build's agents first.
    """
    name = _name(deployment)
    await _checked(app_path, name, force)
    await deploys.set_current(await client(), name, build)
    out.console.print(f"{name}: new runs go to {build}")


@deploy.command()
@command
async def ramp(
    build: Build,
    percent: Annotated[float, typer.Argument(help="Share of new runs, 0-100; 0 ends the ramp.")],
    deployment: Deployment = None,
    app_path: App = None,
    force: Force = False,
) -> None:
    """Send PERCENT of new runs to BUILD and the rest to the current build.

    Runs `deploy check` with this build's agents first (not to end a ramp).
    """
    name = _name(deployment)
    if percent:
        await _checked(app_path, name, force)
    await deploys.ramp(await client(), name, build, percent)
    share = "ramp ended" if percent == 0 else f"{percent:g}% of new runs go to {build}"
    out.console.print(f"{name}: {share}")
