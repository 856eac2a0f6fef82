"""`durability="turn"`: a reply's reads run as local activities, saved together, and a
Temporal server SIGKILLed mid-turn costs at most that turn's reads, never an effect.

Real parts: the dev server (one of the test's own for the kill), the worker, a SQLite table
counting reads and one unique on the effect key counting payments; every history replayed.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
from pathlib import Path

import pytest
from pydantic import BaseModel
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from tests.conftest import running_worker
from waypoint._agent import Agent
from waypoint._operations.dev_server import free_port, start_dev_server
from waypoint._tools import ToolContext, tool
from waypoint._workflows.agent import AgentWorkflow
from waypoint.client import runs
from waypoint.errors import ToolDefinitionError
from waypoint.settings import connect
from waypoint.testing import reply, text, tool_use

READS = 8


class City(BaseModel):
    city: str


class Pay(BaseModel):
    payee: str


def counted(db: Path, table: str, key: str) -> None:
    unique = " PRIMARY KEY" if table == "paid" else ""  # payments unique on the effect key
    with sqlite3.connect(db) as conn:
        conn.execute(f"CREATE TABLE IF NOT EXISTS {table} (key TEXT{unique})")
        conn.execute(f"INSERT OR IGNORE INTO {table} VALUES (?)", (key,))


def count(db: Path, table: str) -> int:
    with sqlite3.connect(db) as conn:
        return conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]


def reader(db: Path, durability: str, delay: float = 0.0, name: str = "reader") -> Agent:
    """Two turns of 8 parallel reads, then a payment, then done."""

    @tool("read")
    async def weather(args: City) -> str:
        """Look up the weather."""
        await asyncio.sleep(delay * (1 + int(args.city[-1]) / 4))  # the kill lands mid-turn
        counted(db, "reads", args.city)
        return f"sunny in {args.city}"

    @tool("effect", idempotent=True)
    async def pay(args: Pay, ctx: ToolContext) -> str:
        """Pay someone."""
        assert ctx.effect_key
        counted(db, "paid", ctx.effect_key)
        return f"paid {args.payee}"

    cities = [f"city{i}" for i in range(READS)]
    return Agent(
        name=name,
        model="claude-sonnet-4-6",
        system="You read, then pay.",
        tools=[weather, pay],
        durability=durability,  # type: ignore[arg-type]
        script=[
            reply(*(tool_use("weather", city=c) for c in cities)),
            reply(*(tool_use("weather", city=c.upper()) for c in cities)),
            reply(tool_use("pay", payee="ada")),
            reply(text("Done.")),
        ],
    )


async def kinds(handle: WorkflowHandle) -> list[int]:
    return [e.event_type async for e in handle.fetch_history_events()]


async def replay(handle: WorkflowHandle) -> None:
    history = await handle.fetch_history()
    await Replayer(
        workflows=[AgentWorkflow], data_converter=pydantic_data_converter
    ).replay_workflow(history)


async def test_a_turn_of_reads_runs_as_local_activities_and_an_effect_as_a_step(
    client: Client, tmp_path: Path, task_queue: str
) -> None:
    db = tmp_path / "calls.db"
    done = {}
    for durability in ("step", "turn"):
        agent = reader(db, "step", name=f"reader-{durability}")  # the run picks its own
        async with running_worker(client, [agent], task_queue):
            handle = await runs.start_run(
                client,
                agent.name,
                "go",
                task_queue=task_queue,
                durability=durability,  # type: ignore[arg-type]
            )
            result = await handle.result()
        events = await kinds(handle)
        done[durability] = (
            result,
            events.count(EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED),
            events.count(EventType.EVENT_TYPE_MARKER_RECORDED),
            len(events),
        )
        await replay(handle)
    step, turn = done["step"], done["turn"]
    assert step[0].output == turn[0].output == "Done."
    # step: spec, 4 model calls, 16 reads, 1 payment as activities; turn: the reads are markers
    # (both record the same patch markers besides)
    assert step[1] == 1 + 4 + 2 * READS + 1
    assert turn[1] == 1 + 4 + 1 and turn[2] - step[2] == 2 * READS
    assert turn[3] < step[3]
    assert [r.status for r in turn[0].ledger] == [r.status for r in step[0].ledger]
    assert count(db, "paid") == 2  # one payment per run, each under its own key


async def test_a_server_killed_mid_turn_reads_again_at_most_and_pays_once(
    tmp_path: Path, task_queue: str
) -> None:
    db = tmp_path / "calls.db"
    port, ui_port = free_port(), free_port()
    server = start_dev_server(tmp_path / "state", port=port, ui_port=ui_port)
    try:
        client = await connect({"target_host": server.address}, pydantic_data_converter)
        agent = reader(db, "turn", delay=1.0)
        async with running_worker(client, [agent], task_queue):
            handle = await runs.start_run(client, "reader", "go", task_queue=task_queue)

            async def reading() -> bool:
                return count(db, "reads") > 0 if db.exists() else False

            while not await reading():  # the first turn's reads are running
                await asyncio.sleep(0.05)
            os.kill(server.process.pid, signal.SIGKILL)
            server.process.wait()
            server.process = start_dev_server(
                tmp_path / "state", port=port, ui_port=ui_port
            ).process
            result = await asyncio.wait_for(handle.result(), timeout=120)
        assert result.output == "Done."
        assert count(db, "paid") == 1
        assert READS * 2 <= count(db, "reads") <= READS * 4  # a turn read again, at most
        await replay(handle)
    finally:
        server.stop()


def test_a_durability_that_is_not_one_is_refused_when_the_agent_is_defined() -> None:
    with pytest.raises(ToolDefinitionError, match="durability 'fast' is not one of step, turn"):
        Agent(name="a", model="claude-sonnet-4-6", system="", durability="fast")  # type: ignore[arg-type]
