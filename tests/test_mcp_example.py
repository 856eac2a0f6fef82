"""The README's MCP bank: a server for the pinned `mcp`, an agent over stdio, one payment."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from temporalio.client import Client

from examples.mcp_bank.agent import agents
from tests.conftest import running_worker
from waypoint.client import runs


async def test_the_mcp_bank_example_pays_once_through_its_server(
    client: Client, task_queue: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "bank.sqlite3"
    monkeypatch.setenv("WAYPOINT_BANK", str(db))
    async with running_worker(client, agents(), task_queue):
        handle = await runs.start_run(client, "treasurer", "pay ACME", task_queue=task_queue)
        result = await handle.result()
    assert result.output == "Paid ACME 120.00."
    pay = next(r for r in result.ledger if r.tool == "pay")
    assert pay.status == "completed" and pay.effect_key
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT key, payee, cents FROM payments").fetchall()
    assert rows == [(pay.effect_key, "ACME", 120_00)]
