"""A dev server with Temporal's default dynamic config, to show what Waypoint's tuning buys."""

from __future__ import annotations

import asyncio
import subprocess
import time
from pathlib import Path

from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest
from temporalio.client import Client

from waypoint._operations.dev_server import HOST, DevServer, dev_server_command, free_port
from waypoint.protocol import search_attributes


def _without_dynamic_config(command: list[str]) -> list[str]:
    out: list[str] = []
    skip = False
    for arg in command:
        if skip:
            skip = False
        elif arg == "--dynamic-config-value":
            skip = True
        else:
            out.append(arg)
    return out


async def start_default_server(state_dir: Path, timeout: float = 30.0) -> DevServer:
    """`temporal server start-dev` as Waypoint runs it, minus the dynamic-config flags."""
    state_dir.mkdir(parents=True, exist_ok=True)
    port, ui_port = free_port(), free_port()
    command = _without_dynamic_config(dev_server_command(state_dir, port=port, ui_port=ui_port))
    log_path = state_dir / "server.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    server = DevServer(f"{HOST}:{port}", f"http://{HOST}:{ui_port}", process, state_dir, log_path)
    wanted = {key.name for key in search_attributes.ALL}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            client = await Client.connect(server.address)
            found = await client.operator_service.list_search_attributes(
                ListSearchAttributesRequest(namespace="default")
            )
            if wanted <= set(found.custom_attributes):
                return server
        except RuntimeError:
            pass
        await asyncio.sleep(0.2)
    server.stop()
    raise TimeoutError(f"default-config dev server not ready after {timeout:.0f}s")
