"""A deploy that changes a tool meets an effect in flight, or several calls of one reply.

An effect whose earlier try may have reached downstream is looked up by its key with the new
worker's reconcile, or parked for an operator: never "not run", never a failed run. Calls of one
reply that notice the same change share one replan.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field, replace
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal

import pytest
from pydantic import BaseModel
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle

from tests.agents import PayArgs, Payments, build_agent
from tests.conftest import running_worker, wait_for_count, wait_for_state, wait_until
from tests.mcp_app import mcp_agent, stdio_server
from tests.mcp_server import Ledger
from waypoint._agent import Agent
from waypoint._tools import ToolContext, tool
from waypoint.client import runs
from waypoint.protocol import ModelRequest, ModelResponse, Resolution, RunResult, StepOptions
from waypoint.testing import Script, last_tool_results, reply, text, tool_use

PAY_STEP = "t1.tool.1.pay"
ALWAYS = 1_000
"""A fault counter that never runs out during a test."""
OnChange = Literal["refuse", "replan"]


class NewPayArgs(BaseModel):
    payee: str
    amount: int
    currency: str = "EUR"


def options(max_attempts: int | None = None) -> StepOptions:
    """Fast retries; `max_attempts=1` sends the next look at the effect to the last lookup."""
    fast = StepOptions(
        retry_initial_interval=timedelta(milliseconds=50),
        retry_max_interval=timedelta(milliseconds=100),
    )
    return fast.model_copy(update={"tool_max_attempts": max_attempts or 3})


def script(seen: list[tuple[str, bool]]) -> Script:
    """One pay call, then keep what the model read about it."""

    def after(request: ModelRequest) -> ModelResponse:
        (result,) = last_tool_results(request)
        seen.append((str(result.content), result.is_error))
        return reply(text("done"))

    return [reply(tool_use("pay", payee="ada", amount=5)), after]


def stalling_payer(payments: Payments, on_change: OnChange, seen: list) -> Agent:
    """Pays, then never answers: its reply is lost when the worker stops."""

    @tool("effect", idempotent=True)
    async def pay(args: PayArgs, ctx: ToolContext) -> dict:
        """Pay someone."""
        assert ctx.effect_key
        payments.pay(ctx.effect_key, args.payee, args.amount)
        await asyncio.Event().wait()  # the reply never comes: the worker stops first
        return {}

    return Agent(
        name="payer",
        model="claude-sonnet-4-6",
        system="You pay people.",
        tools=[pay],
        on_change=on_change,
        script=script(seen),
    )


def changed_payer(payments: Payments, seen: list, *, reconcile: bool) -> Agent:
    """The same agent after a deploy that changed pay's schema; with or without a lookup."""

    @tool("effect", idempotent=True)
    async def pay(args: NewPayArgs, ctx: ToolContext) -> dict:
        """Pay someone, in a currency."""
        assert ctx.effect_key
        return payments.pay(ctx.effect_key, args.payee, args.amount)

    if reconcile:

        @pay.reconcile
        async def _find(args: NewPayArgs, ctx: ToolContext) -> dict | None:
            assert ctx.effect_key
            return payments.find(ctx.effect_key)

    return Agent(
        name="payer",
        model="claude-sonnet-4-6",
        system="You pay people.",
        tools=[pay],
        script=script(seen),
    )


async def pay_committed_then_worker_stopped(
    client: Client, task_queue: str, payments: Payments, agent: Agent, max_attempts: int | None
) -> WorkflowHandle:
    """Start a run whose pay commits downstream; stop the worker before its reply is sent."""
    async with running_worker(client, [agent], task_queue):
        handle = await runs.start_run(
            client, "payer", "pay", task_queue=task_queue, options=options(max_attempts)
        )
        await wait_for_count(payments, 1)
    return handle


async def resolved_as_paid(client: Client, handle: WorkflowHandle[Any, RunResult]) -> RunResult:
    """An operator says the parked payment happened; the run goes on to its end."""
    paid = Resolution(step_id=PAY_STEP, action="result", result="paid ada 5", reviewer="ops")
    await runs.resolve(client, handle.id, paid)
    return await asyncio.wait_for(handle.result(), 60)


def pay_record(result: RunResult, step_id: str = PAY_STEP):  # type: ignore[no-untyped-def]
    return next(r for r in result.ledger if r.step_id == step_id)


@pytest.mark.parametrize("max_attempts", [None, 1], ids=["retry", "last-lookup"])
@pytest.mark.parametrize("on_change", ["refuse", "replan"])
async def test_changed_tool_after_a_committed_effect_is_reconciled_not_reported_not_run(
    client: Client, task_queue: str, tmp_path: Path, on_change: OnChange, max_attempts: int | None
) -> None:
    payments = Payments(tmp_path / "p.db")
    seen: list[tuple[str, bool]] = []
    old = stalling_payer(payments, on_change, seen)
    handle = await pay_committed_then_worker_stopped(
        client, task_queue, payments, old, max_attempts
    )
    async with running_worker(client, [changed_payer(payments, seen, reconcile=True)], task_queue):
        result: RunResult = await asyncio.wait_for(handle.result(), 60)
        status = await runs.status(client, handle.id)
    pay = pay_record(result)
    assert (pay.status, pay.reconciled) == ("completed", True)
    assert payments.count() == 1 and payments.count(pay.effect_key) == 1
    ((content, is_error),) = seen
    assert not is_error and '"payee": "ada"' in content
    assert status.plan_version == 1 and not any(".replan." in r.step_id for r in result.ledger)


@pytest.mark.parametrize("on_change", ["refuse", "replan"])
async def test_changed_tool_that_cannot_confirm_a_committed_effect_parks_for_an_operator(
    client: Client, task_queue: str, tmp_path: Path, on_change: OnChange
) -> None:
    payments = Payments(tmp_path / "p.db")
    seen: list[tuple[str, bool]] = []
    old = stalling_payer(payments, on_change, seen)
    handle = await pay_committed_then_worker_stopped(client, task_queue, payments, old, None)
    async with running_worker(client, [changed_payer(payments, seen, reconcile=False)], task_queue):
        status = await wait_for_state(client, handle.id, "needs_reconciliation", timeout=60)
        (unclear,) = status.unresolved
        assert unclear.step_id == PAY_STEP and unclear.effect_key
        assert "changed since this run started" in unclear.reason
        assert "may have reached downstream" in unclear.reason
        result = await resolved_as_paid(client, handle)
    assert pay_record(result).status == "completed"
    assert seen == [("paid ada 5", False)]
    assert payments.count() == 1


@pytest.mark.parametrize("on_change", ["refuse", "replan"])
async def test_operator_retry_after_a_deploy_reconciles_with_the_new_lookup(
    client: Client, task_queue: str, tmp_path: Path, on_change: OnChange
) -> None:
    payments = Payments(tmp_path / "p.db")
    payments.faults.lose_response = 1
    payments.faults.reconcile_unreachable = ALWAYS
    seen: list[tuple[str, bool]] = []
    old = build_agent(payments, script(seen))
    old.on_change = on_change
    async with running_worker(client, [old], task_queue):
        handle = await runs.start_run(
            client, "payer", "pay", task_queue=task_queue, options=options()
        )
        await wait_for_state(client, handle.id, "needs_reconciliation", timeout=60)
    async with running_worker(client, [changed_payer(payments, seen, reconcile=True)], task_queue):
        await runs.resolve(
            client, handle.id, Resolution(step_id=PAY_STEP, action="retry", reviewer="ops")
        )
        result: RunResult = await asyncio.wait_for(handle.result(), 60)
    pay = pay_record(result)
    assert (pay.status, pay.reconciled) == ("completed", True)
    assert payments.count() == 1 and payments.faults.executions == 1
    ((content, is_error),) = seen
    assert not is_error and '"payee": "ada"' in content


@dataclass
class SlowToLoad(Agent):
    """Its spec loads only once the test says so: a replan stays in flight meanwhile."""

    loading: asyncio.Event = field(default_factory=asyncio.Event)

    async def discover(self) -> None:
        await self.loading.wait()
        await super().discover()


async def approvals_pending(client: Client, handle: WorkflowHandle) -> bool:
    return len((await runs.status(client, handle.id)).pending_approvals) == 2


async def both_failed(handle: WorkflowHandle) -> bool:
    history = await handle.fetch_history()
    failed = EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED
    return sum(e.event_type == failed for e in history.events) == 2


async def test_two_calls_of_one_reply_to_changed_tools_share_one_replan(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    payments = Payments(tmp_path / "p.db")
    two_calls = reply(
        tool_use("pay", payee="ada", amount=5), tool_use("pay", payee="bob", amount=7)
    )
    old = build_agent(payments, [two_calls, reply(text("done"))], approval=True)
    old.on_change = "replan"
    async with running_worker(client, [old], task_queue):
        handle = await runs.start_run(
            client, "payer", "pay", task_queue=task_queue, options=options()
        )
        await wait_until(lambda: approvals_pending(client, handle), "both calls await approval")
    seen: list[tuple[str, bool]] = []
    changed = changed_payer(payments, seen, reconcile=True)
    new = SlowToLoad(
        name="payer",
        model="claude-sonnet-4-6",
        system="You pay people.",
        tools=changed.tools,
        script=[two_calls, reply(text("done"))],
    )
    async with running_worker(client, [new], task_queue):
        for step_id in ("t1.tool.1.pay", "t1.tool.2.pay"):
            await runs.approve(client, handle.id, step_id, reviewer="me")
        await wait_until(lambda: both_failed(handle), "both pay calls met the change")
        new.loading.set()
        result: RunResult = await asyncio.wait_for(handle.result(), 60)
        history = await handle.fetch_history()
    failed_tasks = [
        e for e in history.events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED
    ]
    assert failed_tasks == []
    assert [r.step_id for r in result.ledger if ".replan." in r.step_id] == ["t1.replan.2"]
    for step_id in ("t1.tool.1.pay", "t1.tool.2.pay"):
        assert pay_record(result, step_id).status == "error"
    assert payments.count() == 0


@pytest.mark.parametrize("on_change", ["refuse", "replan"])
async def test_mcp_server_changed_after_a_committed_effect_parks_for_an_operator(
    client: Client, task_queue: str, tmp_path: Path, on_change: OnChange
) -> None:
    flag, barriers = tmp_path / "schema-v2", tmp_path / "barriers"
    barriers.mkdir()
    (barriers / "after_commit.pay").touch()
    ledger = Ledger(tmp_path / "ledger.db")
    server = stdio_server(tmp_path / "ledger.db", flag)
    server = replace(server, env={**(server.env or {}), "MCP_TEST_BARRIERS": str(barriers)})
    seen: list[tuple[str, bool]] = []
    agent = mcp_agent(server, script(seen), on_change)
    try:
        async with running_worker(client, [agent], task_queue):
            handle = await runs.start_run(
                client, "mcp_payer", "pay", task_queue=task_queue, options=options()
            )
            await wait_for_count(ledger, 1, timeout=60)  # paid; the reply waits at the barrier
            flag.touch()
            await agent.aclose()  # the reply is lost; the server restarts with pay(..., currency)
            status = await wait_for_state(client, handle.id, "needs_reconciliation", timeout=60)
            (unclear,) = status.unresolved
            assert unclear.step_id == PAY_STEP
            assert "changed since this run's snapshot" in unclear.reason
            assert "may have reached downstream" in unclear.reason
            result = await resolved_as_paid(client, handle)
    finally:
        await agent.aclose()
    assert pay_record(result).status == "completed"
    assert seen == [("paid ada 5", False)]
    assert ledger.count() == 1
