"""`waypoint deploy show / set-current / ramp`: which build new runs go to.

The same with the `temporal` CLI: `temporal worker deployment describe --name NAME`,
`set-current-version --deployment-name NAME --build-id BUILD`, and `set-ramping-version
--deployment-name NAME --build-id BUILD --percentage N`.
"""

from __future__ import annotations

import os
from typing import Annotated

import typer

from waypoint import deploys
from waypoint.cli import render as out
from waypoint.cli.app import app
from waypoint.cli.common import AsJson, client, command, fail

deploy = typer.Typer(
    help="Route new runs between worker builds; running runs stay on theirs.",
    no_args_is_help=True,
)
app.add_typer(deploy, name="deploy")

Build = Annotated[str, typer.Argument(help="The build id, as the worker's WAYPOINT_BUILD_ID.")]
Deployment = Annotated[
    str | None,
    typer.Option(help="The worker deployment; WAYPOINT_DEPLOYMENT by default.", metavar="NAME"),
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
    routing = await deploys.routing(await client(), _name(deployment))
    if as_json:
        out.print_json(vars(routing) | {"builds": list(routing.builds)})
        return
    out.console.print(f"deployment {routing.deployment}")
    out.console.print(f"current    {routing.current or '(none: unversioned workers)'}")
    if routing.ramping:
        out.console.print(f"ramping    {routing.ramping} at {routing.ramp_percent:g}%")
    out.console.print(f"builds     {', '.join(routing.builds) or '(none yet)'}")
    if routing.propagating:
        out.console.print("routing    propagating: some task queues still route by the last change")


@deploy.command("set-current")
@command
async def set_current(build: Build, deployment: Deployment = None) -> None:
    """Send new runs to BUILD; pinned runs finish on the build they started on."""
    name = _name(deployment)
    await deploys.set_current(await client(), name, build)
    out.console.print(f"{name}: new runs go to {build}")


@deploy.command()
@command
async def ramp(
    build: Build,
    percent: Annotated[float, typer.Argument(help="Share of new runs, 0-100; 0 ends the ramp.")],
    deployment: Deployment = None,
) -> None:
    """Send PERCENT of new runs to BUILD and the rest to the current build."""
    name = _name(deployment)
    await deploys.ramp(await client(), name, build, percent)
    share = "ramp ended" if percent == 0 else f"{percent:g}% of new runs go to {build}"
    out.console.print(f"{name}: {share}")
