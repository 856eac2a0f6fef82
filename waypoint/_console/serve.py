"""Running the console: its options from the environment, and uvicorn in this process.

- `WAYPOINT_CONSOLE_USERS`: the users file (default `.waypoint/console-users.toml`).
- `WAYPOINT_CONSOLE_KEY`: the console's Ed25519 signing key (base64 or `@file`, as
  `WAYPOINT_DECISION_KEY`); workers hold its public half as `console:PUBLIC` in
  `WAYPOINT_DECISION_KEYS`, and then accept `alice via console` as signed.
- `WAYPOINT_CONSOLE_SIGNER`: the name of that key (default `console`).
- `WAYPOINT_CONSOLE_SECRET`: a file holding the cookie-signing secret (made if missing,
  default `.waypoint/console-secret`); replicas behind one address share it.
- `WAYPOINT_CONSOLE_SESSIONS`: the SQLite file of signed-in sessions and sign-in attempts
  (default `.waypoint/console-sessions.db`); replicas share it too, so a sign-out holds on
  each and the sign-in throttle counts across them.
- `WAYPOINT_CONSOLE_IDLE_MINUTES`: a session ends after this long without a request (30).
- `WAYPOINT_CONSOLE_AUDIT`: a file the audit log's JSON lines are appended to (default:
  standard error); `waypoint._console.audit` says what they hold.
- `WAYPOINT_NOTIFY`: the notifications file (default `.waypoint/_notify.toml`), checked at
  start; `GET /r/{token}` follows the review links its notices carry.
- `WAYPOINT_CONSOLE_SECURE=1`: cookies only over HTTPS (set it behind a TLS proxy).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import uvicorn
from fastapi import FastAPI
from temporalio.client import Client

from waypoint._console import DEFAULT_PORT, USERS_FILE
from waypoint._console.access import Console
from waypoint._console.app import build_app
from waypoint._console.audit import Audit
from waypoint._console.people import Role
from waypoint._console.sessions import IDLE_SECONDS, Sessions, Throttle, UsedLinks
from waypoint._notify.config import NOTIFY_FILE, load_notify
from waypoint._notify.links import load_secret
from waypoint._operations.codec_server import QuietH11
from waypoint.errors import WaypointError

SECRET_FILE = Path(".waypoint/console-secret")
SESSIONS_FILE = Path(".waypoint/console-sessions.db")


def console_from_env(
    client: Client, env: Mapping[str, str], *, task_queue: str, ui_base: str = ""
) -> Console:
    """A console for `client`, configured by the `WAYPOINT_CONSOLE_*` variables.

    Raises:
        NotifyConfigError: The notifications file (`WAYPOINT_NOTIFY`) does not read or fit:
            the console checks it too, since its review links come from the workers'.
    """
    from waypoint._security.signing import load_private_key

    load_notify(Path(env.get("WAYPOINT_NOTIFY", "") or NOTIFY_FILE), None)  # holds no secrets
    key_spec = env.get("WAYPOINT_CONSOLE_KEY", "")
    secret = load_secret(Path(env.get("WAYPOINT_CONSOLE_SECRET", "") or SECRET_FILE))
    store = Path(env.get("WAYPOINT_CONSOLE_SESSIONS", "") or SESSIONS_FILE)
    idle = env.get("WAYPOINT_CONSOLE_IDLE_MINUTES", "") or str(IDLE_SECONDS // 60)
    if not idle.isdigit() or int(idle) < 1:
        raise WaypointError(f"WAYPOINT_CONSOLE_IDLE_MINUTES={idle!r}: whole minutes, 1 or more")
    return Console(
        client=client,
        people_file=Path(env.get("WAYPOINT_CONSOLE_USERS", "") or USERS_FILE),
        sessions=Sessions(secret, store=store, idle=int(idle) * 60),
        throttle=Throttle(store=store),
        used_links=UsedLinks(store=store),
        task_queue=task_queue,
        signing_key=load_private_key(key_spec) if key_spec else None,
        signer=env.get("WAYPOINT_CONSOLE_SIGNER", "") or "console",
        ui_base=ui_base,
        secure_cookies=env.get("WAYPOINT_CONSOLE_SECURE", "") == "1",
        env=dict(env),
        audit=Audit(path=Path(env["WAYPOINT_CONSOLE_AUDIT"]))
        if env.get("WAYPOINT_CONSOLE_AUDIT")
        else Audit(),
    )


class _Server(uvicorn.Server):
    """uvicorn, leaving stop signals to the process it serves in (`waypoint demo`, the CLI)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        """Take no signal handlers: whoever started the console stops it."""
        yield


@dataclass
class RunningConsole:
    """A console served by uvicorn on this event loop (`waypoint demo`, tests)."""

    app: FastAPI
    server: uvicorn.Server
    task: asyncio.Task[Any]

    @property
    def port(self) -> int:
        """The port it listens on (the real one when asked for port 0)."""
        return self.server.servers[0].sockets[0].getsockname()[1]

    def url(self, host: str = "127.0.0.1") -> str:
        """Its address."""
        return f"http://{host}:{self.port}"

    def guest_link(self, user: str, roles: Mapping[str, Role]) -> str:
        """A one-time sign-in link for `user` with `roles`, for this process's life."""
        console: Console = self.app.state.console
        console.guests[user] = dict(roles)
        return f"{self.url()}/signin/once?token={console.once.issue(user)}"

    async def stop(self) -> None:
        """Stop serving and wait for it."""
        self.server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await self.task


async def start_console(
    console: Console, host: str = "127.0.0.1", port: int = DEFAULT_PORT, codec: Any = None
) -> RunningConsole:
    """Serve the console on this loop; returns once it listens.

    Raises:
        WaypointError: It could not listen (the port is taken).
    """
    app = build_app(console, codec)
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except (OSError, OverflowError) as err:
        sock.close()
        why = getattr(err, "strerror", None) or str(err)
        raise WaypointError(
            f"the console cannot listen on {host}:{port}: {why} (pick another --port)"
        ) from None
    config = uvicorn.Config(
        app, log_level="warning", lifespan="off", access_log=False, http=QuietH11
    )  # no access log: a mounted codec's path may hold its token
    server = _Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:  # uvicorn sets it once it serves the socket
        if task.done():
            await task
            raise WaypointError("the console stopped while starting")
        await asyncio.sleep(0.02)
    return RunningConsole(app, server, task)
