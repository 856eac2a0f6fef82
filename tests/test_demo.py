"""`waypoint demo --yes` end to end: the README's first command, minus the install."""

from __future__ import annotations

import base64
import os
import re
import socket
import subprocess
from pathlib import Path

import pytest
from temporalio.testing import WorkflowEnvironment

from tests.cli import installed
from waypoint._operations.processes import free_port
from waypoint.demo.downstream import count_emails, count_vendors


def demo(
    cwd: Path, *flags: str, timeout: float = 120, **env: str
) -> subprocess.CompletedProcess[str]:
    """`waypoint demo FLAGS` in `cwd` with `env` on top of this process's, no terminal on stdin."""
    return installed({**os.environ, **env}, "demo", *flags, cwd=cwd, timeout=timeout, stdin="")


def test_demo_onboards_the_vendor_exactly_once(
    env: WorkflowEnvironment, tmp_path: Path, task_queue: str
) -> None:
    demo_dir = tmp_path / "demo"
    proc = demo(
        tmp_path,
        "--yes",
        TEMPORAL_ADDRESS=env.client.service_client.config.target_host,
        WAYPOINT_TASK_QUEUE=task_queue,
        WAYPOINT_DEMO_DIR=str(demo_dir),
        COLUMNS="200",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "scripted" in out
    assert "approval needed" in out and "t4.tool.1.create_vendor" in out
    assert "Northwind Components GmbH is onboarded." in out
    assert re.search(r"web ui http://\S+/namespaces/default/workflows/vendor_onboarding-", out)
    assert "create_vendor: 1 row(s)" in out and "send_welcome_email: 1 row(s)" in out
    assert count_vendors(demo_dir) == 1
    assert count_emails(demo_dir) == 1


async def test_demo_with_encryption_keeps_supplier_data_out_of_history(
    env: WorkflowEnvironment, tmp_path: Path, task_queue: str
) -> None:
    key = base64.b64encode(bytes(range(32))).decode()
    proc = demo(
        tmp_path,
        "--yes",
        TEMPORAL_ADDRESS=env.client.service_client.config.target_host,
        WAYPOINT_TASK_QUEUE=task_queue,
        WAYPOINT_DEMO_DIR=str(tmp_path / "demo"),
        WAYPOINT_ENCRYPTION_KEYS=f"k1:{key}",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Northwind Components GmbH is onboarded." in proc.stdout  # decrypted for the CLI
    run = re.search(r"run (vendor_onboarding-\S+)", proc.stdout)[1]  # type: ignore[index]
    history = await env.client.get_workflow_handle(run).fetch_history()  # no codec: raw
    raw = history.to_json() + str(bytes(history.events[0].SerializeToString()))
    serialized = b"".join(e.SerializeToString() for e in history.events)
    for secret in ("DE287451934", "DE66370400440412345678"):
        assert secret not in raw and secret.encode() not in serialized


def test_the_demo_starts_a_server_only_on_a_plain_loopback_address() -> None:
    """A server of someone else's, or one behind TLS or a key, is never stood in for."""
    from waypoint._cli.demo import _local_port

    assert _local_port({"target_host": "127.0.0.1:7233"}) == 7233
    assert _local_port({"target_host": "localhost:24111"}) == 24111
    assert _local_port({"target_host": "10.0.0.5:7233"}) is None
    assert _local_port({"target_host": "acme.tmprl.cloud:7233", "tls": True}) is None
    assert _local_port({"target_host": "127.0.0.1:7233", "tls": True}) is None
    assert _local_port({"target_host": "127.0.0.1:7233", "api_key": "k"}) is None
    assert _local_port({"target_host": "127.0.0.1:port"}) is None
    assert _local_port({}) is None


def test_a_demo_whose_web_ui_port_is_taken_says_which_address_to_give(tmp_path: Path) -> None:
    """No traceback and no server left behind: one line naming the variable to set."""
    held = socket.socket()
    port = 0
    for _ in range(50):  # a free port whose Web UI port (+1000) this test can hold
        port = free_port()
        try:
            held.bind(("127.0.0.1", port + 1000))
            break
        except OSError:
            continue
    else:
        pytest.fail("no free port whose port + 1000 is free too")
    with held:
        held.listen()
        proc = demo(
            tmp_path,
            *("--yes", "--stop-server", "--no-console"),
            timeout=60,
            TEMPORAL_ADDRESS=f"127.0.0.1:{port}",
            COLUMNS="200",
        )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"Port {port + 1000} is held by another program" in proc.stderr
    assert "TEMPORAL_ADDRESS=127.0.0.1:PORT" in proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    assert not (tmp_path / ".waypoint" / "server.pid").exists()


def test_a_demo_given_a_console_port_that_is_no_port_refuses_before_starting(
    tmp_path: Path,
) -> None:
    proc = demo(
        tmp_path,
        "--yes",
        "--stop-server",
        timeout=60,
        WAYPOINT_CONSOLE_PORT="eighty",
        COLUMNS="200",
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "WAYPOINT_CONSOLE_PORT='eighty': give a port number" in proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    assert not (tmp_path / ".waypoint").exists()  # no server was started


def test_a_demo_given_a_notify_url_that_is_no_address_refuses_before_starting(
    tmp_path: Path,
) -> None:
    proc = demo(tmp_path, "--yes", "--notify-url", "hooks.example.com", timeout=60, COLUMNS="200")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "--notify-url:3: channels.demo.url: not an http(s) address" in proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    assert not (tmp_path / ".waypoint").exists()  # no server was started
