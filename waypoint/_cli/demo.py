"""`waypoint demo`: the vendor-onboarding run end to end, from an empty machine.

Starts the embedded server if none answers, runs a worker and the console in this process,
starts the run, follows it, asks the person at the terminal (or in the console, through the
one-time sign-in link it prints) to approve the vendor record, then prints the result, the
ledger, the downstream row count and the Web UI link.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from temporalio.client import Client

from waypoint._cli import render as out
from waypoint._cli.app import app
from waypoint._cli.common import command, opt
from waypoint._operations import ui
from waypoint.client import runs
from waypoint.errors import (
    DecisionRefusedError,
    ServerNotReachableError,
    StepNotPendingError,
    WaypointError,
)
from waypoint.protocol import PendingApproval
from waypoint.settings import Settings, connect, connect_config, ui_link

if TYPE_CHECKING:
    from waypoint._console.serve import RunningConsole
    from waypoint._notify.config import NotifyConfig
    from waypoint._operations.dev_server import DevServer

STATE_DIR = Path(".waypoint")
LOOPBACK = {"127.0.0.1", "localhost"}


def _local_port(config: dict[str, object]) -> int | None:
    """The port of a plain loopback address the demo may start a server on; None otherwise.

    Only `127.0.0.1` or `localhost`, without TLS or an API key, and a port whose Web UI port
    (port + 1000) is a valid unprivileged one too.
    """
    from waypoint._operations.dev_server import UI_PORT_OFFSET

    host, _, port = str(config.get("target_host") or "").rpartition(":")
    if host not in LOOPBACK or not port.isdigit() or config.get("tls") or config.get("api_key"):
        return None
    return int(port) if 1024 <= int(port) <= 65535 - UI_PORT_OFFSET else None


async def _connect_or_start_server(stop_server: bool) -> tuple[Client, DevServer | None]:
    """Use the configured server; on a loopback address with none running, start one there."""
    try:
        return await connect(), None
    except ServerNotReachableError:
        config = connect_config()
        port = _local_port(config)
        if port is None:
            raise
    from waypoint._operations import dev_server as embedded

    out.console.print("[dim]no Temporal server running: starting the embedded dev server…[/]")
    try:
        dev = embedded.start_dev_server(
            STATE_DIR, port=port, namespace=config["namespace"], detach=not stop_server
        )
    except embedded.ServerAlreadyRunningError as err:
        raise embedded.DevServerError(
            f"The demo's server from {STATE_DIR}/ already runs at {err.address}, not at "
            f"{config['target_host']}: set TEMPORAL_ADDRESS={err.address}, or stop it with "
            "`waypoint server --stop`."
        ) from None
    except embedded.PortInUseError as err:
        raise embedded.DevServerError(
            f"Port {err.port} is held by another program: give the demo a free one with "
            f"TEMPORAL_ADDRESS=127.0.0.1:PORT (its Web UI takes PORT+{embedded.UI_PORT_OFFSET})."
        ) from None
    out.console.print(f"temporal  {dev.address}    web ui  {dev.ui_url}")
    try:
        return await connect(), dev
    except BaseException:
        dev.stop()
        raise


def _console_port() -> int:
    """`WAYPOINT_CONSOLE_PORT`, or the console's default; checked before anything starts."""
    from waypoint._console import DEFAULT_PORT

    raw = os.environ.get("WAYPOINT_CONSOLE_PORT", "")
    if raw and not (raw.isdigit() and 0 < int(raw) < 65536):
        raise WaypointError(f"WAYPOINT_CONSOLE_PORT={raw!r}: give a port number, 1 to 65535")
    return int(raw or DEFAULT_PORT)


DEMO_AUDIT = Path(".waypoint/console-audit.jsonl")


async def _console(
    client: Client, settings: Settings, agent: str, port: int
) -> RunningConsole | None:
    """The console beside the demo, with a one-time sign-in as its approver; None if it fails."""
    from waypoint._console.serve import console_from_env, start_console

    base = ui.ui_base(connect_config()["target_host"], settings.ui_url)
    env = {"WAYPOINT_CONSOLE_AUDIT": str(DEMO_AUDIT), **os.environ}  # not over the demo's lines
    made = console_from_env(client, env, task_queue=settings.task_queue, ui_base=base)
    try:
        try:
            running = await start_console(made, port=port)
        except WaypointError:  # the port is taken (another console, another demo): any free one
            running = await start_console(made, port=0)
    except Exception as err:  # noqa: BLE001 - the demo goes on at the terminal without it
        out.console.print(f"[dim]console not started: {err}[/]")
        return None
    link = running.guest_link("demo", {agent: "approver"})
    out.console.print(f"console   {running.url()}    sign in once: {link}")
    return running


def _demo_notify(url: str, agent: str, console_url: str) -> NotifyConfig:
    """A generic webhook at `url` that hears of the demo's approvals (`--notify-url`).

    Signed with `$WAYPOINT_DEMO_NOTIFY_SECRET` (`demo` unless set); checked as a notifications
    file is, so a bad address is one line.
    """
    from waypoint._notify.config import read_notify

    lines = [f"[console]\nurl = {json.dumps(console_url)}\n"] if console_url else []
    lines += [
        f'[channels.demo]\ntype = "webhook"\nurl = {json.dumps(url)}',
        'secret_env = "WAYPOINT_DEMO_NOTIFY_SECRET"\n',
        f'[agents.{agent}]\nroutes = {{ approver = ["demo"] }}',
    ]
    env = {"WAYPOINT_DEMO_NOTIFY_SECRET": os.environ.get("WAYPOINT_DEMO_NOTIFY_SECRET", "demo")}
    return read_notify("\n".join(lines), Path("--notify-url"), env)


async def run_demo(
    settings: Settings,
    *,
    approve_all: bool,
    stop_server: bool,
    with_console: bool = True,
    notify_url: str = "",
) -> None:
    """Run the demo; see the module docstring."""
    console_port = _console_port() if with_console else None
    if notify_url:
        _demo_notify(notify_url, "check", "")  # a bad address stops the demo before it starts
    client, dev = await _connect_or_start_server(stop_server)
    try:
        await _onboard(
            client,
            settings,
            approve_all=approve_all,
            console_port=console_port,
            notify_url=notify_url,
        )
    finally:
        if dev is not None and stop_server:
            dev.stop()
    if dev is not None and not stop_server:
        out.console.print("[dim]the embedded server keeps running: `waypoint server --stop`[/]")


async def _onboard(
    client: Client,
    settings: Settings,
    *,
    approve_all: bool,
    console_port: int | None,
    notify_url: str = "",
) -> None:
    """One demo run on `client`: a worker, the console (unless no port), the run followed."""
    from waypoint.demo import DEMO_TASK, build_agent, demo_dir_from_env
    from waypoint.demo.downstream import count_emails, count_vendors

    agent = build_agent()
    if settings.use_anthropic:
        out.console.print(f"model: Claude ({agent.model})")
    else:
        out.console.print(
            "model: [bold yellow]scripted[/] (offline stand-in for Claude, replies from the "
            "agent's script; set ANTHROPIC_API_KEY to use Claude)"
        )

    async def on_approval(pending: PendingApproval) -> None:
        out.console.print(
            f"\n[magenta]approval needed[/] {pending.step_id}: {pending.tool}\n"
            f"{json.dumps(pending.arguments, indent=2)}"
        )
        command = f"waypoint approve {handle.id} {pending.step_id}"
        if approve_all:
            approved = True
        elif sys.stdin.isatty():
            approved = await asyncio.to_thread(typer.confirm, "Approve?", default=True)
        else:
            where = f" or in the console ({console.url()})" if console else ""
            out.console.print(f"waiting for a person: `{command}` (or reject){where}")
            return
        try:
            await (runs.approve if approved else runs.reject)(
                client,
                handle.id,
                pending.step_id,
                reviewer="demo" if approve_all else settings.operator,
                reason="" if approved else "declined at the terminal",
            )
        except (StepNotPendingError, DecisionRefusedError):
            out.console.print("already decided (in the console?)\n")
            return
        out.console.print("approved\n" if approved else "rejected\n")

    from waypoint._worker import worker_from_settings  # only here: every other command skips it

    console = None
    if console_port is not None:
        console = await _console(client, settings, agent.name, console_port)
    notify = None
    if notify_url:
        notify = _demo_notify(notify_url, agent.name, console.url() if console else "")
        out.console.print(f"notices   {notify_url}    (signed: $WAYPOINT_DEMO_NOTIFY_SECRET)")
    worker = worker_from_settings(client, [agent], settings, notify)
    try:
        async with worker:
            handle = await runs.start_run(
                client, agent.name, DEMO_TASK, task_queue=settings.task_queue
            )
            link = ui_link(settings, handle.id)
            out.console.print(f"run {handle.id}\nweb ui {link}\n")
            await out.follow(client, handle.id, on_approval)
            final = await handle.result()
            records = final.ledger
    finally:
        if console is not None:
            await console.stop()
    out.console.print(f"\n[bold]result[/]\n{final.output}\n")
    out.print_ledger(records)
    out.console.print(
        f"{final.turns} turns, {final.total_tokens:,} tokens, {out.money(final.cost_usd)}"
    )
    effects = {r.tool: r.effect_key for r in records if r.effect_key and r.status == "completed"}
    downstream = demo_dir_from_env()
    for tool, count in (("create_vendor", count_vendors), ("send_welcome_email", count_emails)):
        key = effects.get(tool)
        rows = count(downstream, key) if key else 0
        out.console.print(f"{tool}: {rows} row(s) for this run in {downstream}")
    out.console.print(f"web ui {link}")


@app.command()
@command
async def demo(
    yes: Annotated[bool, typer.Option("--yes", help="Approve without asking.")] = False,
    stop_server: Annotated[
        bool, opt("Stop the embedded server the demo started when it ends.")
    ] = False,
    with_console: Annotated[
        bool,
        typer.Option(
            "--console/--no-console",
            help="Serve the console beside the run (port $WAYPOINT_CONSOLE_PORT or 8234).",
        ),
    ] = True,
    notify_url: Annotated[
        str,
        opt("Post each approval's notice to this generic webhook (docs/notifications.md).", "URL"),
    ] = "",
) -> None:
    """Onboard a vendor end to end: server, worker, a run that pauses for approval."""
    await run_demo(
        Settings.from_env(),
        approve_all=yes,
        stop_server=stop_server,
        with_console=with_console,
        notify_url=notify_url,
    )
