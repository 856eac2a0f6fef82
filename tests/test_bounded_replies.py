"""A reply's tool input is bounded before it is recorded (issue 34.2).

A tool input nested ~210 deep completed its model step and then failed every workflow task
decoding it ("Failed decoding arguments"): the run was wedged for ever. One wider than
Temporal's payload limit failed its step on every try. Each is now an error result the model
reads, and the run goes on.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from temporalio.client import Client

from tests.agents import Payments, build_agent
from tests.conftest import running_worker
from waypoint.client.runs import start_run
from waypoint.protocol import ModelRequest, ModelResponse, ToolResultBlock
from waypoint.providers.bounds import MAX_INPUT_DEPTH, depth_beyond
from waypoint.scripted import last_tool_results, reply, text, tool_use


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
        ("past the payload limit", "x" * (2 * 1024 * 1024 + 1), "bytes of JSON"),
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


def test_depth_is_measured_without_recursion() -> None:
    assert not depth_beyond(nested(MAX_INPUT_DEPTH), MAX_INPUT_DEPTH)
    assert depth_beyond(nested(MAX_INPUT_DEPTH + 1), MAX_INPUT_DEPTH)
    assert depth_beyond(nested(100_000), MAX_INPUT_DEPTH)  # past Python's recursion limit
