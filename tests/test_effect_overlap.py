"""An effect's attempts never overlap, whatever its body does: a thread it started is outwaited.

The pattern of docs/steps-and-prices.md, an `async def` effect awaiting
`asyncio.to_thread(bank.pay, ...)`, and a plain `def` effect, each writing after its timeout
into a table that does not deduplicate: one row, or the retry's reconcile looked before the
first write landed.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio.client import Client

from tests.conftest import running_worker
from tests.drain_app import Transfers, build
from tests.test_drain import cancelled_mid_effect
from waypoint.client import runs
from waypoint.protocol import StepOptions

SECONDS = 2.5
"""How long the transfer takes; its thread writes after this."""
OPTIONS = StepOptions(
    tool_timeout=timedelta(seconds=1),
    tool_heartbeat_timeout=timedelta(seconds=2),
    retry_initial_interval=timedelta(milliseconds=50),
    retry_max_interval=timedelta(milliseconds=100),
)
"""The tool's timeout runs out long before its thread writes; retries come at once."""


@pytest.mark.parametrize("agent", ["to_thread_sender", "thread_sender"])
async def test_an_effect_whose_thread_outlives_its_timeout_happens_once(
    client: Client, tmp_path: Path, task_queue: str, agent: str
) -> None:
    transfers = Transfers(tmp_path / "transfers.db")
    agents = build(transfers, tmp_path / "started", seconds=SECONDS)
    async with running_worker(client, agents, task_queue):
        handle = await runs.start_run(
            client, agent, "pay ada", task_queue=task_queue, options=OPTIONS
        )
        result = await asyncio.wait_for(handle.result(), 60)
        await asyncio.sleep(SECONDS)  # longer than a thread a retry could have left running
    assert transfers.count() == 1
    send = next(r for r in result.ledger if (r.tool or "").startswith("send_"))
    assert send.status == "completed", send
    assert transfers.find(send.effect_key or "") is not None
    assert result.output == "Sent."


async def test_a_cancel_during_a_to_thread_effect_waits_for_it_and_records_it(
    client: Client, tmp_path: Path, task_queue: str
) -> None:
    options = OPTIONS.model_copy(update={"tool_timeout": timedelta(seconds=30)})
    transfers, sent, ledger = await cancelled_mid_effect(
        client, tmp_path, task_queue, "to_thread_sender", SECONDS, options
    )
    assert sent == 1  # the run ended after the transfer, not before it
    send = next(r for r in ledger if r.tool == "send_to_thread")
    assert send.status == "completed", send
    assert transfers.find(send.effect_key or "") is not None
    await asyncio.sleep(SECONDS)
    assert transfers.count() == 1
