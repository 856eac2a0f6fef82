"""What a model, a tool or a client sends is bounded before history holds it (issue 34.2).

A tool input nested ~210 deep completed its model step and then failed every workflow task
decoding it ("Failed decoding arguments"): the run was wedged for ever. One wider than
Temporal's payload limit failed its step on every try. Each is now an error result the model
reads, and the run goes on. A tool result past the limit is cut (the model told so), and a
client answer past the agent's bounds is refused, by Update and by signal alike.
"""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest
from pydantic import BaseModel
from temporalio.client import Client, WorkflowHandle

from tests.agents import Payments, build_agent
from tests.client_tool_app import asker
from tests.conftest import running_worker, wait_for_state
from waypoint import Agent, SizeLimits
from waypoint._tools import tool
from waypoint.client import runs
from waypoint.client.runs import start_run
from waypoint.errors import DecisionRefusedError
from waypoint.protocol import ClientAnswer, ModelRequest, ModelResponse, ToolResultBlock
from waypoint.protocol.bounds import INLINE_RESULT_BYTES, depth_beyond
from waypoint.testing import last_tool_results, reply, text, tool_use

LIMIT = 2 * 1024 * 1024
"""Temporal's default payload limit."""


def nested(levels: int) -> object:
    value: object = 1
    for _ in range(levels):
        value = [value]
    return value


@pytest.mark.parametrize(
    ("name", "payee", "says"),
    [
        ("210 deep", nested(210), "nests deeper than"),
        ("100,000 wide", list(range(100_000)), "bytes of JSON"),
        ("past the payload limit", "x" * (LIMIT + 1), "bytes of JSON"),
    ],
)
async def test_an_unbounded_tool_input_is_an_error_result_and_the_run_goes_on(
    client: Client, task_queue: str, tmp_path: Path, name: str, payee: object, says: str
) -> None:
    payments = Payments(tmp_path / "p.db")
    seen: list[ToolResultBlock] = []

    def turn2(request: ModelRequest) -> ModelResponse:
        seen.extend(last_tool_results(request))
        return reply(text("Sorry, I will send less."))

    agent = build_agent(payments, [reply(tool_use("pay", payee=payee, amount=1)), turn2])
    async with running_worker(client, [agent], task_queue):
        handle = await start_run(client, "payer", name, task_queue=task_queue)
        result = await asyncio.wait_for(handle.result(), 60)  # a wedged run never ends
    assert result.state == "done"
    assert payments.faults.executions == 0
    assert len(seen) == 1 and seen[0].is_error and says in str(seen[0].content)


async def test_an_agent_sets_its_own_bounds(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    payments = Payments(tmp_path / "p.db")
    seen: list[ToolResultBlock] = []

    def turn2(request: ModelRequest) -> ModelResponse:
        seen.extend(last_tool_results(request))
        return reply(text("Sorry."))

    agent = build_agent(payments, [reply(tool_use("pay", payee=nested(4), amount=1)), turn2])
    agent = dataclasses.replace(agent, size_limits=SizeLimits(max_depth=3))
    async with running_worker(client, [agent], task_queue):
        handle = await start_run(client, "payer", "four deep", task_queue=task_queue)
        result = await asyncio.wait_for(handle.result(), 60)
    assert result.state == "done" and payments.faults.executions == 0
    assert len(seen) == 1 and seen[0].is_error
    assert "nests deeper than 3 levels" in str(seen[0].content)


class Dump(BaseModel):
    table: str


async def test_a_tool_result_past_the_payload_limit_is_cut_and_the_model_told(
    client: Client, task_queue: str
) -> None:
    @tool("read")
    async def dump(args: Dump) -> str:
        """Read a whole table."""
        return "row\n" * (LIMIT // 4 + 1)

    seen: list[ToolResultBlock] = []

    def turn2(request: ModelRequest) -> ModelResponse:
        seen.extend(last_tool_results(request))
        return reply(text("Read it."))

    script = [reply(tool_use("dump", table="orders")), turn2]
    agent = Agent(
        name="dumper", model="claude-sonnet-4-6", system="Read.", tools=[dump], script=script
    )
    async with running_worker(client, [agent], task_queue):
        handle = await start_run(client, "dumper", "dump it", task_queue=task_queue)
        result = await asyncio.wait_for(handle.result(), 60)  # failed on every try before
    assert result.state == "done"
    (block,) = seen
    content = str(block.content)
    assert not block.is_error and content.startswith("row\nrow\n")
    assert len(content.encode()) <= INLINE_RESULT_BYTES
    assert f"this result was {LIMIT + 4:,} bytes" in content


async def test_an_answer_past_the_bounds_is_refused_by_update_and_by_signal(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    step = "t1.tool.1.ask_user"
    deep = {"choice": "red", "extra": nested(100)}  # pydantic reads it; the agent does not
    async with running_worker(client, [asker(tmp_path / "notes.db")], task_queue):
        handle: WorkflowHandle[object, object] = await start_run(
            client, "asker", "pick", task_queue=task_queue
        )
        await wait_for_state(client, handle.id, "awaiting_answer")
        with pytest.raises(DecisionRefusedError, match="the answer nests deeper than 64"):
            await runs.answer(client, handle.id, step, deep)
        await handle.signal("answer", ClientAnswer(step_id=step, result=deep))
        wide = {"choice": "red", "note": "x" * (LIMIT // 8)}
        await handle.signal("answer", ClientAnswer(step_id=step, result=wide))
        status = await runs.status(client, handle.id)
        assert status.state == "awaiting_answer"
        reasons = [i.reason for i in status.ignored_signals if i.signal == "answer"]
        assert "the answer nests deeper than 64 levels" in reasons[0]
        assert "bytes of JSON, more than the 262,144" in reasons[1]
        await runs.answer(client, handle.id, step, {"choice": "blue"})
        result = await asyncio.wait_for(handle.result(), 60)
    assert result.output == 'User said: {"choice": "blue"}'


def test_depth_is_measured_without_recursion() -> None:
    depth = SizeLimits().max_depth
    assert not depth_beyond(nested(depth), depth)
    assert depth_beyond(nested(depth + 1), depth)
    assert depth_beyond(nested(100_000), depth)  # past Python's recursion limit
