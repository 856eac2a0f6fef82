"""A lookup slower than the heartbeat timeout still answers: reconcile and re-listing heartbeat."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from temporalio.client import Client

from tests.agents import PAY_SCRIPT, Faults, PayArgs, Payments, build_agent
from tests.conftest import running_worker
from waypoint._agent import Agent
from waypoint._tools import ToolContext
from waypoint.client import runs
from waypoint.protocol import RunResult, StepOptions
from waypoint.testing import reply, text, tool_use

HEARTBEAT = timedelta(seconds=2)
SLOW = 2.5 * HEARTBEAT.total_seconds()
"""How long a lookup takes: far past the heartbeat timeout, well within the tool timeout."""
FAST = StepOptions(
    tool_heartbeat_timeout=HEARTBEAT,
    retry_initial_interval=timedelta(milliseconds=50),
    retry_max_interval=timedelta(milliseconds=100),
)


async def test_reconcile_slower_than_the_heartbeat_timeout_still_confirms_the_effect(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    faults = Faults(lose_response=1)
    payments = Payments(tmp_path / "p.db", faults)
    agent = build_agent(payments, PAY_SCRIPT)
    pay = agent.registry.get("pay")
    assert pay is not None and pay.options.reconcile is not None
    find, lookups = pay.options.reconcile, []

    @pay.reconcile
    async def slow_find(args: PayArgs, ctx: ToolContext) -> dict | None:
        lookups.append(ctx.attempt)
        await asyncio.sleep(SLOW)  # the bank's lookup is slow today
        return await find(args, ctx)

    async with running_worker(client, [agent], task_queue):
        handle = await runs.start_run(client, "payer", "pay", task_queue=task_queue, options=FAST)
        result: RunResult = await asyncio.wait_for(handle.result(), 60)
    record = next(r for r in result.ledger if r.step_id == "t2.tool.1.pay")
    assert (record.status, record.attempt, record.reconciled) == ("completed", 2, True)
    assert lookups == [2]  # asked once, not timed out and asked again
    assert faults.executions == 1 and payments.count() == 1
    assert result.output == "Paid ada 5."


@dataclass
class SlowToList(Agent):
    """Re-listing its tools' server takes longer than the heartbeat timeout (a slow MCP server)."""

    listings: int = 0

    async def refresh_tool(self, name: str, schema_hash: str) -> None:
        self.listings += 1
        await asyncio.sleep(SLOW)
        await super().refresh_tool(name, schema_hash)


async def test_tool_listing_slower_than_the_heartbeat_timeout_still_runs_the_tool(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    tools = build_agent(Payments(tmp_path / "p.db"), []).tools
    agent = SlowToList(
        name="reader",
        model="claude-sonnet-4-6",
        system="You look things up.",
        tools=tools,
        script=[reply(tool_use("weather", city="Oslo")), reply(text("done"))],
    )
    async with running_worker(client, [agent], task_queue):
        handle = await runs.start_run(
            client, "reader", "weather", task_queue=task_queue, options=FAST
        )
        result: RunResult = await asyncio.wait_for(handle.result(), 60)
    record = next(r for r in result.ledger if r.step_id == "t1.tool.1.weather")
    assert (record.status, record.attempt) == ("completed", 1)
    assert record.summary == "sunny in Oslo"
    assert agent.listings == 1
