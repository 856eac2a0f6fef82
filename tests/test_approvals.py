"""Approvals are signals bound to the exact tool call and arguments a person reviewed."""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.client import Client

from tests.agents import PAY_SCRIPT, PayArgs, Payments, build_agent
from tests.conftest import payer_run, running_worker, wait_for_count, wait_for_state
from tests.test_policies import step
from waypoint.client import runs
from waypoint.client.runs import start_run
from waypoint.errors import StepNotPendingError
from waypoint.protocol import ApprovalDecision, ModelRequest, ModelResponse
from waypoint.testing import last_tool_results, reply, text, tool_use


async def test_approved_payment_runs_once_after_approval(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    payments = Payments(tmp_path / "payments.db")
    async with payer_run(client, task_queue, payments) as handle:
        status = await wait_for_state(client, handle.id, "awaiting_approval")
        (pending,) = status.pending_approvals
        assert pending.step_id == "t2.tool.1.pay"
        assert pending.arguments == {"payee": "ada", "amount": 5}
        assert payments.count() == 0
        await runs.approve(client, handle.id, pending.step_id, reviewer="grace")
        result = await handle.result()
    assert result.output == "Paid ada 5."
    assert payments.count() == 1
    assert step(result.ledger, "t2.tool.1.pay").status == "completed"
    # Every step, the approval check and the pure `add` too, is a regular activity on the
    # agent's own queue: only workers that host the agent take it.
    history = await handle.fetch_history()
    scheduled = [
        e.activity_task_scheduled_event_attributes
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
    ]
    assert "waypoint.prepare_tool" in [a.activity_type.name for a in scheduled]
    assert {a.task_queue.name for a in scheduled} == {f"{task_queue}@payer"}
    markers = [e.marker_recorded_event_attributes.marker_name for e in history.events]
    assert markers.count("core_local_activity") == 0


async def test_rejection_goes_back_to_the_model_and_nothing_is_paid(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    payments = Payments(tmp_path / "payments.db")

    def after_review(request: ModelRequest) -> ModelResponse:
        (result,) = last_tool_results(request)
        return reply(text(f"Not paid: {result.content}"))

    script = [PAY_SCRIPT[0], PAY_SCRIPT[1], after_review]
    async with payer_run(client, task_queue, payments, script) as handle:
        await wait_for_state(client, handle.id, "awaiting_approval")
        await runs.reject(client, handle.id, "t2.tool.1.pay", reviewer="grace", reason="no PO")
        result = await handle.result()
    assert "rejected by grace: no PO" in result.output
    assert payments.count() == 0
    assert step(result.ledger, "t2.tool.1.pay").status == "rejected"


async def test_approval_for_unknown_or_stale_step_is_refused_and_recorded(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    payments = Payments(tmp_path / "payments.db")
    async with payer_run(client, task_queue, payments) as handle:
        await wait_for_state(client, handle.id, "awaiting_approval")
        with pytest.raises(StepNotPendingError, match=r"t9.tool.1.pay.*pending: t2.tool.1.pay"):
            await runs.approve(client, handle.id, "t9.tool.1.pay", reviewer="x")
        # A raw signal (as `temporal workflow signal` would send) is ignored and recorded.
        await handle.signal("approve", ApprovalDecision(step_id="t9.tool.1.pay", reviewer="x"))
        stale = ApprovalDecision(step_id="t2.tool.1.pay", reviewer="x", arguments_hash="0" * 64)
        await handle.signal("approve", stale)
        status = await runs.status(client, handle.id)
        assert status.state == "awaiting_approval"
        reasons = [(i.step_id, i.reason) for i in status.ignored_signals]
        assert reasons[0][0] == "t9.tool.1.pay" and "no approval is pending" in reasons[0][1]
        assert reasons[1][0] == "t2.tool.1.pay" and "stale" in reasons[1][1]
        assert payments.count() == 0
        await runs.approve(client, handle.id, "t2.tool.1.pay", reviewer="grace")
        assert (await handle.result()).output == "Paid ada 5."
    assert payments.count() == 1


async def test_approval_predicate_asks_only_for_large_amounts(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    payments = Payments(tmp_path / "payments.db")

    def large(args: PayArgs) -> bool:
        return args.amount > 100

    script = [
        reply(tool_use("pay", payee="ada", amount=5), tool_use("pay", payee="bob", amount=500)),
        reply(text("done")),
    ]
    agent = build_agent(payments, script, approval=large)
    async with running_worker(client, [agent], task_queue):
        handle = await start_run(client, "payer", "pay", task_queue=task_queue)
        status = await wait_for_state(client, handle.id, "awaiting_approval")
        assert [p.step_id for p in status.pending_approvals] == ["t1.tool.2.pay"]
        await wait_for_count(payments, 1)
        await runs.approve(client, handle.id, "t1.tool.2.pay", reviewer="grace")
        await handle.result()
    assert payments.count() == 2
