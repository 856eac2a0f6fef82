"""`waypoint console` and the people it lets in: `console-user`, `console-token`.

The console (`waypoint._console`) serves the approvals inbox, runs and their cost in a browser,
and the same as an HTTP API, against the Temporal server the connection profile names.
"""

from __future__ import annotations

import asyncio
import getpass
import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from waypoint._cli import render as out
from waypoint._cli.app import app
from waypoint._cli.common import STOP_SIGNALS, client, command, fail, opt, unblock_stop_signals
from waypoint._console import DEFAULT_PORT, USERS_FILE
from waypoint._console.people import hash_password, hash_token, new_token, parse_roles, save_entry
from waypoint._operations import ui
from waypoint.errors import WaypointError
from waypoint.settings import Settings, connect_config

Roles = Annotated[
    list[str],
    typer.Option(
        "--role",
        help="AGENT=ROLE, again for each agent; * for every agent. ROLE: viewer, approver "
        "(decides) or operator (also starts, resumes, cancels).",
        metavar="AGENT=ROLE",
    ),
]
UsersFile = Annotated[
    Path | None, opt("The users file (default $WAYPOINT_CONSOLE_USERS or .waypoint/).", "FILE")
]


def _users_file(given: Path | None) -> Path:
    return given or Path(os.environ.get("WAYPOINT_CONSOLE_USERS", "") or USERS_FILE)


@app.command("console")
@command
async def console(
    host: Annotated[str, opt("Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, opt("Port to listen on.", "PORT")] = DEFAULT_PORT,
    codec: Annotated[
        bool,
        typer.Option(
            "--codec",
            help="Also serve the codec server under /codec (WAYPOINT_ENCRYPTION_KEYS, and its "
            "token as for `waypoint codec-server`): one HTTP server to secure, not two.",
        ),
    ] = False,
) -> None:
    """Serve the console: the approvals inbox, runs, their cost and live words, and its API."""
    from waypoint._console.serve import console_from_env, start_console  # authlib: cryptography

    settings = Settings.from_env()
    c = await client()
    base = ui.ui_base(connect_config()["target_host"], settings.ui_url)
    made = console_from_env(c, os.environ, task_queue=settings.task_queue, ui_base=base)
    running = await start_console(made, host, port, codec=_codec_app() if codec else None)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, stop.set)
    unblock_stop_signals()
    url = running.url(host)
    out.console.print(f"console on {url} (API: {url}/api, OpenAPI: {url}/api/openapi.json)")
    await asyncio.wait(
        [asyncio.ensure_future(stop.wait()), running.task], return_when=asyncio.FIRST_COMPLETED
    )
    await running.stop()


def _codec_app() -> object:
    """The codec server's ASGI app, for `/codec`, configured as `waypoint codec-server` is."""
    from waypoint._cli.server import codec_token
    from waypoint._operations import connection
    from waypoint._operations.codec_server import DEV_UI_ORIGINS, codec_asgi_app
    from waypoint.settings import encryption_codec

    token_file = os.environ.get("WAYPOINT_CODEC_TOKEN_FILE")
    token = codec_token(Path(token_file) if token_file else None)
    codec = encryption_codec(Settings.from_env())
    if codec is None:
        raise WaypointError(
            "--codec needs WAYPOINT_ENCRYPTION_KEYS (see `waypoint._security.codec`)"
        )
    profile = connection.load()
    origins = connection.codec_origins(profile, DEV_UI_ORIGINS)
    return codec_asgi_app(codec, token, origins, namespace=profile.namespace)


@app.command("console-user")
def console_user(
    name: Annotated[str, typer.Argument(help="The person's sign-in name.")],
    role: Roles,
    users_file: UsersFile = None,
    password_stdin: Annotated[
        bool, typer.Option("--password-stdin", help="Read the password from stdin.")
    ] = False,
) -> None:
    """Add a person to the console's users file, or change their password and roles."""
    try:
        roles = parse_roles(role)
        password = sys.stdin.readline().rstrip("\n") if password_stdin else getpass.getpass()
        if len(password) < 8:
            raise WaypointError("a password needs at least 8 characters")
        path = _users_file(users_file)
        save_entry(path, "users", name, hash_password(password), roles)
    except WaypointError as err:
        raise fail(str(err)) from None
    out.console.print(f"{name} can sign in to the console ({path})")


@app.command("console-token")
def console_token(
    name: Annotated[str, typer.Argument(help="The application's name.")],
    role: Roles,
    users_file: UsersFile = None,
) -> None:
    """Make an API token for an application; it is printed once, only its hash is kept."""
    try:
        roles = parse_roles(role)
        token = new_token()
        path = _users_file(users_file)
        save_entry(path, "tokens", name, hash_token(token), roles)
    except WaypointError as err:
        raise fail(str(err)) from None
    out.console.print(token)
