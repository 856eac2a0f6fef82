"""docs/composable-agents.md's MCP bank: a server for the pinned `mcp`, an agent over stdio."""

from __future__ import annotations

import asyncio
import os
import sqlite3
from pathlib import Path

import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from examples.mcp_bank.agent import agents
from tests.cli import ROOT
from tests.conftest import running_worker
from waypoint.client import runs
from waypoint.testing import WorkerProcess


def bank_servers() -> list[int]:
    """Pids of this process's children that are the bank's MCP server."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            stat = (proc / "stat").read_text()
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        if parent == os.getpid() and b"examples.mcp_bank.server" in cmdline:
            found.append(int(proc.name))
    return found


async def test_the_mcp_bank_example_pays_once_through_its_server(
    client: Client, task_queue: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "bank.sqlite3"
    monkeypatch.setenv("WAYPOINT_BANK", str(db))
    async with running_worker(client, agents(), task_queue):
        handle = await runs.start_run(client, "treasurer", "pay ACME", task_queue=task_queue)
        result = await handle.result()
        assert bank_servers(), "the worker holds a session to its stdio server"
    assert not bank_servers()  # the worker closed its sessions as it stopped: no leftover server
    assert result.output == "Paid ACME 120.00."
    pay = next(r for r in result.ledger if r.tool == "pay")
    assert pay.status == "completed" and pay.effect_key
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT key, payee, cents FROM payments").fetchall()
    assert rows == [(pay.effect_key, "ACME", 120_00)]


async def test_a_worker_with_an_mcp_server_stops_with_a_clean_log(
    client: Client, env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    settings = {
        **os.environ,
        "TEMPORAL_ADDRESS": env.client.service_client.config.target_host,
        "WAYPOINT_TASK_QUEUE": task_queue,
        "WAYPOINT_BANK": str(tmp_path / "bank.sqlite3"),
        "PYTHONPATH": str(ROOT),
    }
    log = tmp_path / "worker.log"
    worker = WorkerProcess("examples.mcp_bank.agent:agents", settings, log)
    try:
        worker.start()
        handle = await runs.start_run(client, "treasurer", "pay ACME", task_queue=task_queue)
        assert (await handle.result()).output == "Paid ACME 120.00."
        assert await asyncio.to_thread(worker.stop) == 0
    finally:
        worker.kill()
    printed = log.read_text()
    for noise in ("Traceback", "BrokenPipeError", "never awaited", "Activity not found"):
        assert noise not in printed, printed
