"""`correct` meets every state a step can be in: refused with a reason, never a failed task."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowHandle

from tests.agents import PAY_SCRIPT, Faults, Payments, build_agent
from tests.client_tool_app import asker
from tests.conftest import running_worker, wait_for_state
from waypoint.client import runs
from waypoint.errors import DecisionRefusedError
from waypoint.protocol import (
    AgentState,
    Correction,
    Resolution,
    RunResult,
    StepOptions,
    ToolResultBlock,
)
from waypoint.testing import reply, text, tool_use

FAST = StepOptions(retry_initial_interval=StepOptions().retry_initial_interval / 20)


async def refused_both_ways(
    client: Client, handle: WorkflowHandle, correction: Correction, why: str
) -> None:
    """The update is refused with `why`; the same as a raw signal is recorded as ignored."""
    with pytest.raises(DecisionRefusedError, match=re.escape(why)):
        await runs.correct(client, handle.id, correction)
    await handle.signal("correct", correction)
    deadline = asyncio.get_running_loop().time() + 20
    while True:
        ignored = (await runs.status(client, handle.id)).ignored_signals
        if any(i.signal == "correct" and why in i.reason for i in ignored):
            return
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"the correct signal was not recorded as ignored: {ignored}")
        await asyncio.sleep(0.05)


def results_for(state: AgentState | RunResult, use_id: str) -> list[str]:
    """What the transcript holds as the result of tool call `use_id`."""
    assert isinstance(state, AgentState)
    return [
        str(b.content)
        for m in state.messages
        for b in m.content
        if isinstance(b, ToolResultBlock) and b.tool_use_id == use_id
    ]


def fix(step_id: str) -> Correction:
    return Correction(step_id=step_id, result="corrected", reviewer="ops")


async def test_correcting_a_step_awaiting_approval_is_refused_and_the_approval_goes_through(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    payments = Payments(tmp_path / "p.db")
    agent = build_agent(payments, PAY_SCRIPT, approval=True)
    async with running_worker(client, [agent], task_queue, max_cached_workflows=0):
        handle = await runs.start_run(client, "payer", "pay", task_queue=task_queue)
        await wait_for_state(client, handle.id, "awaiting_approval")
        why = "t2.tool.1.pay cannot be corrected yet: it is awaiting approval"
        await refused_both_ways(client, handle, fix("t2.tool.1.pay"), why)
        sent = await runs.correct(client, handle.id, fix("t1.tool.1.weather"))  # earlier turn
        assert sent.recorded and sent.step_id == "t2.operator.1"
        assert sent.decided_by.startswith("ops")
        await runs.approve(client, handle.id, "t2.tool.1.pay", reviewer="me")
        result = await asyncio.wait_for(handle.result(), 60)
    assert result.state == "done" and result.output == "Paid ada 5."
    assert payments.count() == 1
    pay = next(r for r in result.ledger if r.step_id == "t2.tool.1.pay")
    assert pay.status == "completed"


async def test_correcting_a_finished_call_of_the_turn_still_running_is_refused(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """The weather call is done, but its reply's pay call awaits approval: no results yet."""
    payments = Payments(tmp_path / "p.db")
    script = [
        reply(tool_use("weather", city="Oslo"), tool_use("pay", payee="ada", amount=5)),
        reply(text("Paid ada 5.")),
    ]
    agent = build_agent(payments, script, approval=True)
    async with running_worker(client, [agent], task_queue):
        handle = await runs.start_run(client, "payer", "pay", task_queue=task_queue)
        await wait_for_state(client, handle.id, "awaiting_approval")
        ledger = {r.step_id: r.status for r in await runs.ledger(client, handle.id)}
        assert ledger["t1.tool.1.weather"] == "completed"
        why = "turn 1 is still running (other calls of its reply have not finished)"
        await refused_both_ways(client, handle, fix("t1.tool.1.weather"), why)
        await runs.approve(client, handle.id, "t1.tool.2.pay", reviewer="me")
        result = await asyncio.wait_for(handle.result(), 60)
        state = await runs.state(client, handle.id)
    assert result.state == "done" and payments.count() == 1
    assert results_for(state, "toolu_t1_1") == ["sunny in Oslo"]  # nothing was replaced


async def test_correcting_a_step_awaiting_an_answer_is_refused_and_the_answer_goes_through(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    agent = asker(tmp_path / "notes.db")
    async with running_worker(client, [agent], task_queue):
        handle = await runs.start_run(client, "asker", "pick", task_queue=task_queue)
        await wait_for_state(client, handle.id, "awaiting_answer")
        why = "it is waiting for a client's answer; answer it first"
        await refused_both_ways(client, handle, fix("t1.tool.1.ask_user"), why)
        await runs.answer(client, handle.id, "t1.tool.1.ask_user", {"choice": "red"})
        result = await asyncio.wait_for(handle.result(), 60)
    assert result.output == 'User said: {"choice": "red"}'


async def test_correcting_a_step_awaiting_reconciliation_is_refused_and_resolve_goes_through(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    payments = Payments(tmp_path / "p.db", Faults(lose_response=1, reconcile_unreachable=1))
    agent = build_agent(payments, PAY_SCRIPT)
    async with running_worker(client, [agent], task_queue):
        handle = await runs.start_run(client, "payer", "pay", task_queue=task_queue, options=FAST)
        await wait_for_state(client, handle.id, "needs_reconciliation")
        why = "its effect is unconfirmed; say what happened with `waypoint resolve` first"
        await refused_both_ways(client, handle, fix("t2.tool.1.pay"), why)
        retry = Resolution(step_id="t2.tool.1.pay", action="retry", reviewer="ops")
        await runs.resolve(client, handle.id, retry)
        result = await asyncio.wait_for(handle.result(), 60)
    assert result.state == "done" and result.output == "Paid ada 5."
    assert payments.count() == 1 and payments.faults.executions == 1


async def test_correcting_a_running_step_is_refused_and_the_step_finishes(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    payments = Payments(tmp_path / "p.db")
    agent = build_agent(payments, [reply(tool_use("weather", city="Oslo")), reply(text("ok"))])
    weather = agent.registry.get("weather")
    assert weather is not None
    inner, entered, release = weather.fn, asyncio.Event(), asyncio.Event()

    async def held(args):  # type: ignore[no-untyped-def]
        entered.set()
        await release.wait()
        return await inner(args)

    weather.fn = held
    async with running_worker(client, [agent], task_queue):
        handle = await runs.start_run(client, "payer", "look", task_queue=task_queue)
        await asyncio.wait_for(entered.wait(), 20)
        why = "t1.tool.1.weather cannot be corrected yet: it is still running"
        await refused_both_ways(client, handle, fix("t1.tool.1.weather"), why)
        release.set()
        result = await asyncio.wait_for(handle.result(), 60)
    assert result.state == "done" and result.output == "ok"
