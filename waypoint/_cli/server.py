"""Commands that run things (embedded server, codec server, worker) and ready a server.

`setup` registers Waypoint's search attributes on any Temporal server and namespace;
`connection` shows which server, namespace and credentials the connection profile gives.
"""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path
from typing import Annotated

import typer
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import (
    AddSearchAttributesRequest,
    ListSearchAttributesRequest,
)
from temporalio.client import Client
from temporalio.service import RPCError

from waypoint._cli import render as out
from waypoint._cli.app import app
from waypoint._cli.common import (
    STOP_SIGNALS,
    AsJson,
    client,
    command,
    fail,
    hold_stop_signals,
    interrupt_on_stop_signals,
    opt,
    unblock_stop_signals,
)
from waypoint._operations import connection, ui
from waypoint.errors import WaypointError
from waypoint.protocol import search_attributes
from waypoint.settings import Settings

STATE_DIR = Path(".waypoint")


async def missing_search_attributes(c: Client) -> list[str]:
    """Waypoint's search attributes the client's namespace lacks."""
    listing = await c.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace=c.namespace)
    )
    known = set(listing.custom_attributes)
    return [key.name for key in search_attributes.ALL if key.name not in known]


@app.command()
@command
async def setup() -> None:
    """Register Waypoint's search attributes on the configured server and namespace (once)."""
    c = await client()
    missing = await missing_search_attributes(c)
    if not missing:
        out.console.print(f"namespace {c.namespace!r} has Waypoint's search attributes already")
        return
    kinds = {key.name: int(key.indexed_value_type) for key in search_attributes.ALL}
    request = AddSearchAttributesRequest(
        namespace=c.namespace,
        search_attributes={name: IndexedValueType.ValueType(kinds[name]) for name in missing},
    )
    await c.operator_service.add_search_attributes(request)
    out.console.print(f"registered on namespace {c.namespace!r}: {', '.join(missing)}")


@app.command("register-search-attributes", hidden=True)
@command
async def register_search_attributes() -> None:
    """Same as `waypoint setup`."""
    await setup.__wrapped__()  # type: ignore[attr-defined]


@app.command("connection")
def show_connection(as_json: AsJson = False) -> None:
    """Show the Temporal connection the profile gives: address, namespace, TLS files, API key."""
    try:
        shown = connection.load().summary()
    except WaypointError as err:
        raise fail(str(err)) from None
    if as_json:
        out.print_json(shown)
        return
    for key, value in shown.items():
        out.console.print(f"{key:<15} {'-' if value is None else value}", highlight=False)


@app.command()
@command
async def worker(
    app_path: Annotated[
        str | None, typer.Option("--app", help="module:attribute naming your agents.")
    ] = None,
    deployment: Annotated[
        str | None, opt("Worker deployment to join (WAYPOINT_DEPLOYMENT).", "NAME")
    ] = None,
    build_id: Annotated[
        str | None, opt("This worker's build in it (WAYPOINT_BUILD_ID).", "BUILD")
    ] = None,
) -> None:
    """Run a worker for your agents until interrupted (Ctrl-C or SIGTERM drains it).

    Draining: no new steps are taken; running ones get WAYPOINT_DRAIN_SECONDS to finish.
    """
    from waypoint._plugin import WaypointPlugin  # the worker's imports, here only
    from waypoint._worker import load_agents, worker_from_settings

    settings = Settings.from_env()
    given = {"deployment": deployment, "build_id": build_id}
    settings = settings.model_copy(update={k: v for k, v in given.items() if v})
    agents = load_agents(app_path or settings.app)
    c = await client()
    try:
        missing = await missing_search_attributes(c)
    except RPCError:  # e.g. no operator permission on a cloud namespace: start anyway
        missing = []
    if missing:
        out.errors.print(
            f"[yellow]warning:[/] namespace {c.namespace!r} lacks {', '.join(missing)}: "
            "runs cannot start until you run `waypoint setup`"
        )
    w = worker_from_settings(c, agents, settings)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, stop.set)
    unblock_stop_signals()
    model = "Claude" if settings.use_anthropic else "the scripted model (offline)"
    names = ", ".join(a.name for a in agents)
    async with w:
        plugin = next(p for p in w.config().get("plugins", ()) if isinstance(p, WaypointPlugin))
        await plugin.polling.wait()  # set once it polls, or gave up: leaving `with` says why
        # Printed once the worker polls and SIGTERM drains it: scripts may wait for this line.
        build = f" as {settings.deployment}.{settings.build_id}" if settings.deployment else ""
        out.console.print(f"worker on queue {settings.task_queue!r}{build}: {names}, using {model}")
        out.console.print("ready")
        await stop.wait()
        out.console.print(
            f"shutting down: running steps have {settings.drain_seconds:g}s to finish "
            "(WAYPOINT_DRAIN_SECONDS)"
        )
    for agent in agents:  # after the drain: MCP sessions the last activities used
        await agent.aclose()


def _stop_detached(state_dir: Path | None) -> str:
    """Stop the server in `state_dir`; with none given, in `.waypoint/`, else the last one started.

    Returns:
        The state dir of the server stopped.

    Raises:
        WaypointError: No server runs from `state_dir` (or, with none given, anywhere recorded).
    """
    from waypoint._operations import dev_server as embedded

    asked = (state_dir or STATE_DIR).resolve()
    if embedded.stop_dev_server(asked):
        return str(asked)
    recorded = ui.recorded_server().get("state_dir", "")
    if state_dir is None and recorded and Path(recorded) != asked:
        if embedded.stop_dev_server(Path(recorded)):
            return recorded
    elsewhere = f"; the last one started runs from {recorded}" if recorded else ""
    raise WaypointError(
        f"no detached server runs from {asked}: nothing stopped{elsewhere} (give that --state-dir)"
    )


@app.command()
def server(
    port: Annotated[int, opt("gRPC port.", "PORT")] = 7233,
    ui_port: Annotated[int | None, opt("Web UI port (default port+1000).", "PORT")] = None,
    state_dir: Annotated[
        Path | None, opt("Where the SQLite file lives (default: .waypoint).", "DIR")
    ] = None,
    stop: Annotated[
        bool,
        typer.Option(
            "--stop",
            help="Stop the detached server of --state-dir (none given: of .waypoint, "
            "else the last one started).",
        ),
    ] = False,
    codec_endpoint: Annotated[
        str | None,
        opt(
            "Codec server URL the Web UI decrypts payloads through. It is visible in `ps` "
            "and in the UI's /api/v1/settings, so it must hold no token: set a token-bearing "
            "URL in the UI's own codec server settings instead."
        ),
    ] = None,
) -> None:
    """Run the embedded Temporal dev server (SQLite, Web UI) in the foreground."""
    from waypoint._operations import dev_server as embedded

    if codec_endpoint and _carriescodec_token(codec_endpoint):
        raise fail(
            "--codec-endpoint holds the codec server's token, which would show in "
            "the dev server's process arguments and /api/v1/settings. Start the server without "
            "it and set the endpoint in the Web UI's codec server settings (kept in your browser)."
        )
    if stop:
        try:
            out.console.print(f"server stopped (state {_stop_detached(state_dir)})")
        except WaypointError as err:
            raise fail(str(err)) from None
        return
    state_dir = state_dir or STATE_DIR
    interrupt_on_stop_signals()
    try:
        dev = embedded.start_dev_server(
            state_dir, port=port, ui_port=ui_port, ui_codec_endpoint=codec_endpoint
        )
    except WaypointError as err:
        raise fail(str(err)) from None
    out.console.print(f"temporal  {dev.address}\nweb ui    {dev.ui_url}\nstate     {state_dir}")
    out.console.print("[dim]Ctrl-C stops the server[/]")
    try:
        dev.process.wait()
    except KeyboardInterrupt:
        pass
    finally:
        dev.stop()


def codec_token(token_file: Path | None) -> str:
    """The codec server's token from `token_file` or WAYPOINT_CODEC_TOKEN: never from argv."""
    from waypoint._operations.codec_server import CodecTokenError, read_token_file

    if token_file is not None:
        return read_token_file(token_file)
    token = os.environ.get("WAYPOINT_CODEC_TOKEN", "").strip()
    if not token:
        raise CodecTokenError(
            "set WAYPOINT_CODEC_TOKEN or pass --token-file (a file only you can read); "
            "the token is never taken from the command line, where `ps` shows it"
        )
    return token


def _carriescodec_token(url: str) -> bool:
    """Whether `url` holds the codec token this shell knows (environment or token file)."""
    path = os.environ.get("WAYPOINT_CODEC_TOKEN_FILE")
    try:
        token = codec_token(Path(path) if path else None)
    except WaypointError:
        return False
    return token in url


@app.command("codec-server")
def codec_server(
    token_file: Annotated[
        Path | None,
        opt(
            "File holding the token (mode 600). Otherwise WAYPOINT_CODEC_TOKEN is used.",
            "FILE",
            envvar="WAYPOINT_CODEC_TOKEN_FILE",
        ),
    ] = None,
    port: Annotated[int, opt("Port on 127.0.0.1.", "PORT")] = 8081,
    origin: Annotated[
        list[str] | None, opt("Web UI origin allowed by CORS (repeatable).", "URL")
    ] = None,
) -> None:
    """Let the Web UI decrypt payloads: serves /decode and /encode with WAYPOINT_ENCRYPTION_KEYS."""
    from waypoint._operations.codec_server import DEV_UI_ORIGINS, serve_codec
    from waypoint.settings import encryption_codec

    try:
        token = codec_token(token_file)
        codec = encryption_codec(Settings.from_env())
        profile = connection.load()
    except WaypointError as err:
        raise fail(str(err)) from None
    if codec is None:
        raise fail("set WAYPOINT_ENCRYPTION_KEYS (see `waypoint._security.codec`)")
    origins = origin or connection.codec_origins(profile, DEV_UI_ORIGINS)
    hold_stop_signals()  # Ctrl-C and SIGTERM end it, also when started in the background
    try:
        server = serve_codec(codec, token, "127.0.0.1", port, origins, namespace=profile.namespace)
    except OSError as err:  # e.g. the port is taken
        raise fail(f"cannot listen on 127.0.0.1:{port}: {err.strerror or err}") from None
    port = server.port  # the one it got, when asked for port 0
    server.start()  # uvicorn's thread and its workers inherit the held signals: sigwait takes them
    try:
        out.console.print(
            f"codec server on http://127.0.0.1:{port} for namespace {profile.namespace!r} "
            f"(profile {profile.profile!r}, {profile.address}); UI origins: {', '.join(origins)}"
        )
        out.console.print(
            f"web ui: in its codec server settings, set http://127.0.0.1:{port}/<token> "
            "and choose your browser's setting"
        )
        signal.sigwait(STOP_SIGNALS)
    finally:
        server.stop()
