"""The Typer application every command module adds its commands to."""

from __future__ import annotations

import os
from importlib.metadata import PackageNotFoundError, version
from typing import Annotated

import typer
from typer.core import TyperArgument, TyperOption

from waypoint._cli.common import opt


def _plain_types(cls: type[TyperArgument] | type[TyperOption]) -> None:
    """Help without placeholder noise: no `<bool>` on a flag, TEXT for a text option."""
    shown = cls.display_type_rich

    def display_type_rich(self: TyperArgument | TyperOption, ctx: typer.Context) -> str | None:
        if getattr(self, "is_flag", False):
            return None
        label = shown(self, ctx)  # type: ignore[arg-type]
        if label == "<str>":
            return "TEXT" if isinstance(self, TyperOption) else None
        return label

    cls.display_type_rich = display_type_rich  # type: ignore[method-assign]


_plain_types(TyperOption)
_plain_types(TyperArgument)

app = typer.Typer(
    help="Waypoint: durable Claude agents on Temporal. A run resumes, never restarts.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


def _version(value: bool) -> None:
    if value:
        try:  # the installed metadata, which the build took from `waypoint.__version__`
            typer.echo(f"waypoint {version('waypoint-agents')}")
        except PackageNotFoundError:
            typer.echo("waypoint (not installed)")
        raise typer.Exit()


@app.callback()
def _root(
    show_version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version.")
    ] = False,
    profile: Annotated[
        str | None,
        opt(
            "Temporal connection profile in the config file (default: `default`).",
            "NAME",
            envvar="TEMPORAL_PROFILE",
        ),
    ] = None,
    config_file: Annotated[
        str | None,
        opt(
            "TOML file of connection profiles (default: ~/.config/temporalio/temporal.toml).",
            "FILE",
            envvar="TEMPORAL_CONFIG_FILE",
        ),
    ] = None,
) -> None:
    """Waypoint: durable Claude agents on Temporal. A run resumes, never restarts."""
    # Put back in the environment: `waypoint._operations.connection` reads it there, and so do the
    # workers and `temporal` processes a command starts.
    if profile:
        os.environ["TEMPORAL_PROFILE"] = profile
    if config_file:
        os.environ["TEMPORAL_CONFIG_FILE"] = config_file
