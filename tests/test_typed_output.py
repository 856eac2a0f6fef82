"""Typed results: an agent with an `output_type` ends its run with a validated `final_answer`."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, Field
from temporalio.client import Client

from tests.agents import Payments, build_agent
from tests.conftest import Claude, running_worker, wait_for_state
from tests.fake_messages_api import FakeMessagesAPI
from tests.fake_messages_api import text as api_text
from tests.fake_messages_api import tool_use as api_tool_use
from waypoint._agent import Agent
from waypoint._providers.scripted import ScriptedModel
from waypoint._tools import tool
from waypoint.client import runs
from waypoint.errors import ToolDefinitionError
from waypoint.protocol import ModelRequest, ModelResponse, ResumeRequest, StepOptions, TextBlock
from waypoint.protocol.output import FINAL_TOOL
from waypoint.protocol.run import RunResult
from waypoint.testing import Script, final_answer, last_tool_results, reply, text, tool_use

FAST = StepOptions(
    retry_initial_interval=timedelta(milliseconds=50),
    retry_max_interval=timedelta(milliseconds=200),
)


class Receipt(BaseModel):
    """What the payer reports at the end."""

    payee: str
    amount: int = Field(gt=0)
    note: str = ""


def typed_agent(tmp_path: Path, script: Script, retries: int = 2) -> Agent:
    agent = build_agent(Payments(tmp_path / "payments.db"), script)
    return dataclasses.replace(agent, output_type=Receipt, max_output_retries=retries)


async def waypoint(client: Client, *args: str) -> subprocess.CompletedProcess[str]:
    """The `waypoint` CLI as a subprocess, in a thread so the in-process worker keeps serving."""
    env = {
        **os.environ,
        "TEMPORAL_ADDRESS": client.service_client.config.target_host,
        "PYTHONPATH": str(Path(__file__).parent.parent),
    }
    command = [str(Path(sys.executable).parent / "waypoint"), *args]
    return await asyncio.to_thread(
        subprocess.run, command, env=env, capture_output=True, text=True, timeout=60
    )


def final_steps(ledger: list) -> list[tuple[str, str]]:
    return [(r.step_id, r.status) for r in ledger if r.tool == FINAL_TOOL]


async def paid(
    client: Client, task_queue: str, agent: Agent, options: StepOptions | None = None, **worker: Any
) -> tuple[RunResult, ScriptedModel]:
    """The payer's run on "pay" on a worker of its own, to its end, and the model it asked."""
    async with running_worker(client, [agent], task_queue, **worker) as model:
        handle = await runs.start_run(
            client, "payer", "pay", task_queue=task_queue, options=options
        )
        return await handle.result(), model


async def test_valid_final_answer_ends_the_run_with_the_typed_value(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    script = [
        reply(tool_use("add", a=2, b=40)),
        reply(text("Done."), final_answer(Receipt(payee="ada", amount=42))),
    ]
    agent = typed_agent(tmp_path, script)
    async with running_worker(client, [agent], task_queue, max_cached_workflows=0) as model:
        handle = await runs.start_run(client, "payer", "pay", task_queue=task_queue)
        result = await handle.result()
        shown = await runs.status(client, handle.id)
    assert result.state == "done"
    assert shown.detail == "finished: final answer"  # not "tool_use", which reads cut off
    assert result.output_json == {"payee": "ada", "amount": 42, "note": ""}
    assert result.output_as(Receipt) == Receipt(payee="ada", amount=42)
    assert '"payee": "ada"' in result.output
    assert final_steps(result.ledger) == [("t2.tool.1.final_answer", "completed")]
    offered = {t.name: t for t in model.requests[0].tools}
    assert offered[FINAL_TOOL].input_schema == Receipt.model_json_schema()
    assert len(model.calls) == 2


async def test_invalid_answer_goes_back_to_the_model_until_it_fits(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    seen: list[str] = []

    def fix(request: ModelRequest) -> ModelResponse:
        [error] = last_tool_results(request)
        seen.append(str(error.content))
        assert error.is_error
        return reply(final_answer({"payee": "ada", "amount": 5}))

    script = [reply(final_answer({"payee": "ada", "amount": -5})), fix]
    agent = typed_agent(tmp_path, script)
    result, _ = await paid(client, task_queue, agent)
    assert result.output_as(Receipt).amount == 5
    assert "amount: Input should be greater than 0" in seen[0] and "Receipt" in seen[0]
    assert final_steps(result.ledger) == [
        ("t1.tool.1.final_answer", "error"),
        ("t2.tool.1.final_answer", "completed"),
    ]


async def test_a_text_answer_is_asked_to_call_final_answer(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    def answer(request: ModelRequest) -> ModelResponse:
        nudge = request.messages[-1].content[-1]
        assert isinstance(nudge, TextBlock) and FINAL_TOOL in nudge.text
        return reply(final_answer({"payee": "bo", "amount": 1}))

    agent = typed_agent(tmp_path, [reply(text("I paid bo 1.")), answer])
    result, _ = await paid(client, task_queue, agent)
    assert final_steps(result.ledger) == [
        ("t1.output.missing", "error"),
        ("t2.tool.1.final_answer", "completed"),
    ]
    assert result.output_json == {"payee": "bo", "amount": 1, "note": ""}


async def test_final_answer_beside_other_tools_is_not_checked_and_they_run(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    script = [
        reply(tool_use("add", a=1, b=1), final_answer({"payee": "ada", "amount": 2})),
        reply(final_answer({"payee": "ada", "amount": 2})),
    ]
    agent = typed_agent(tmp_path, script)
    result, model = await paid(client, task_queue, agent)
    results = last_tool_results(model.requests[1])
    assert [r.is_error for r in results] == [False, True]
    assert "alone" in str(results[1].content)
    assert final_steps(result.ledger) == [
        ("t1.tool.2.final_answer", "error"),
        ("t2.tool.1.final_answer", "completed"),
    ]
    assert result.output_as(Receipt).amount == 2


async def test_an_answer_that_never_fits_parks_the_run_and_resume_gives_more_tries(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    bad = reply(final_answer({"payee": "ada"}))
    script = [bad, bad, reply(final_answer({"payee": "ada", "amount": 3}))]
    agent = typed_agent(tmp_path, script, retries=1)
    async with running_worker(client, [agent], task_queue, max_cached_workflows=0) as model:
        handle = await runs.start_run(client, "payer", "pay", task_queue=task_queue)
        parked = await wait_for_state(client, handle.id, "output_invalid")
        assert len(model.calls) == 2
        resumed = await waypoint(client, "resume", handle.id)
        assert resumed.returncode == 0 and "more tries" in resumed.stdout, resumed.stderr
        result = await handle.result()
    assert "did not fit Receipt in 2 tries" in parked.detail
    assert "amount: Field required" in parked.detail and "resume" in parked.detail
    assert result.state == "done" and result.output_as(Receipt).amount == 3
    assert [s for _, s in final_steps(result.ledger)] == ["error", "error", "completed"]
    assert len(model.calls) == 3


class ReceiptV2(BaseModel):
    """A later deploy's output type."""

    payee: str
    cents: int


async def test_a_worker_whose_output_type_changed_parks_the_run_until_resumed(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    outage = [True]

    def answer(request: ModelRequest) -> ModelResponse:
        if outage.pop() if outage else False:
            raise ConnectionError("scripted outage")  # parks the run on the first worker
        return reply(final_answer({"payee": "ada", "amount": 3}))

    agent = typed_agent(tmp_path, [answer])
    once = StepOptions(model_max_attempts=1)
    async with running_worker(client, [agent], task_queue):
        handle = await runs.start_run(client, "payer", "pay", task_queue=task_queue, options=once)
        await wait_for_state(client, handle.id, "model_unavailable")
    changed = dataclasses.replace(agent, output_type=ReceiptV2)
    async with running_worker(client, [changed], task_queue):
        await handle.signal("resume", ResumeRequest(reviewer="ops"))
        parked = await wait_for_state(client, handle.id, "output_invalid")
    assert "cannot check the final answer" in parked.detail
    assert "changed since the run began" in parked.detail
    async with running_worker(client, [agent], task_queue):
        await handle.signal("resume", ResumeRequest(reviewer="ops"))
        result = await handle.result()
    assert result.output_as(Receipt).amount == 3
    assert final_steps(result.ledger) == [("t1.tool.1.final_answer", "completed")]


def test_a_tool_named_final_answer_clashes_with_output_type() -> None:
    @tool("pure", name=FINAL_TOOL)
    async def finish(args: Receipt) -> str:
        """Clashes."""
        return "no"

    with pytest.raises(ToolDefinitionError, match="clashes"):
        Agent(name="x", model="m", system="", tools=[finish], output_type=Receipt)


async def test_claude_is_offered_final_answer_with_the_schema_and_sees_its_errors(
    client: Client, task_queue: str, tmp_path: Path, api: FakeMessagesAPI, claude: Claude
) -> None:
    agent = typed_agent(tmp_path, [])
    api.enqueue_message(api_tool_use(FINAL_TOOL, {"payee": "ada", "amount": "many"}))
    api.enqueue_message(api_text("Fixed."), api_tool_use(FINAL_TOOL, {"payee": "ada", "amount": 7}))
    result, _ = await paid(client, task_queue, agent, claude=claude(api), options=FAST)
    assert result.output_as(Receipt) == Receipt(payee="ada", amount=7)
    tools = {t["name"]: t for t in api.message_requests[0].body["tools"]}
    assert tools[FINAL_TOOL]["input_schema"] == Receipt.model_json_schema()
    error = api.message_requests[1].body["messages"][-1]["content"][0]
    assert error["type"] == "tool_result" and error["is_error"] is True
    assert "amount" in str(error["content"])


async def test_waypoint_result_json_prints_the_typed_value(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    script = [reply(final_answer(Receipt(payee="ada", amount=9, note="ok")))]
    untyped = build_agent(Payments(tmp_path / "payments.db"), [reply(text("hi"))], name="plain")
    async with running_worker(client, [typed_agent(tmp_path, script), untyped], task_queue):
        typed_run = await runs.start_run(client, "payer", "pay", task_queue=task_queue)
        plain_run = await runs.start_run(client, "plain", "hi", task_queue=task_queue)
        await typed_run.result()
        await plain_run.result()
    typed = await waypoint(client, "result", typed_run.id, "--json")
    plain = await waypoint(client, "result", plain_run.id, "--json")
    assert typed.returncode == 0, typed.stderr
    assert json.loads(typed.stdout) == {"payee": "ada", "amount": 9, "note": "ok"}
    # Without an output_type, --json prints the whole result record instead.
    assert plain.returncode == 0 and json.loads(plain.stdout)["output"] == "hi"
