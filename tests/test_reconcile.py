"""An ambiguous effect is reconciled by its key, never blindly retried; if nobody can tell, the run
parks until an operator resolves it."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio.client import Client

from tests.agents import PAY_SCRIPT, Faults, PayArgs
from tests.conftest import running_worker
from tests.support.payer import open_payer
from waypoint._agent import Agent
from waypoint._tools import ToolContext, tool
from waypoint.client import runs
from waypoint.errors import StepNotPendingError
from waypoint.protocol import ModelRequest, ModelResponse, Resolution, StepOptions
from waypoint.testing import last_tool_results, reply, text, tool_use

FAST = StepOptions(
    retry_initial_interval=timedelta(milliseconds=50),
    retry_max_interval=timedelta(milliseconds=100),
)
PAY_STEP = "t2.tool.1.pay"
PAY = {"task": "pay", "options": FAST}
"""How these tests start the payer: retries come quickly."""
UNCLEAR = "needs_reconciliation"


def pay_record(result):  # type: ignore[no-untyped-def]
    return next(r for r in result.ledger if r.step_id == PAY_STEP)


@pytest.mark.parametrize(
    ("fault", "reconciled", "executions"),
    [("lose_response", True, 1), ("fail_before_commit", False, 2)],
    ids=[
        "lost_reply_after_commit_is_reconciled_not_repaid",
        "failure_before_commit_is_reconciled_as_not_done_and_run_once",
    ],
)
async def test_an_unclear_try_is_reconciled_and_the_payment_made_once(
    client: Client, task_queue: str, tmp_path: Path, fault: str, reconciled: bool, executions: int
) -> None:
    faults = Faults(**{fault: 1})
    async with open_payer(client, task_queue, tmp_path / "p.db", faults=faults, **PAY) as run:
        result = await run.handle.result()
    record = pay_record(result)
    assert (record.status, record.attempt, record.reconciled) == ("completed", 2, reconciled)
    assert faults.executions == executions
    assert run.payments.count(record.effect_key) == 1
    assert result.output == "Paid ada 5."


async def test_cannot_tell_parks_until_operator_retries(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    faults = Faults(lose_response=1, reconcile_unreachable=1)
    db = tmp_path / "p.db"
    async with open_payer(client, task_queue, db, faults=faults, until=UNCLEAR, **PAY) as run:
        handle, payments = run.handle, run.payments
        assert run.status is not None
        (unclear,) = run.status.unresolved
        assert unclear.step_id == PAY_STEP and "bank lookup unreachable" in unclear.reason
        assert unclear.effect_key and unclear.effect_key.endswith(PAY_STEP)
        with pytest.raises(StepNotPendingError, match="does not need reconciliation"):
            await runs.resolve(client, handle.id, Resolution(step_id="t1.model", action="retry"))
        await runs.resolve(
            client, handle.id, Resolution(step_id=PAY_STEP, action="retry", reviewer="ops")
        )
        result = await handle.result()
    record = pay_record(result)
    assert (record.status, record.reconciled) == ("completed", True)
    assert faults.executions == 1
    assert payments.count(record.effect_key) == 1


async def test_operator_can_record_the_outcome_or_abort(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    seen: list[tuple[str, bool]] = []

    def after_pay(request: ModelRequest) -> ModelResponse:
        (result,) = last_tool_results(request)
        seen.append((result.content, result.is_error))
        return reply(text("ok"))

    script = [PAY_SCRIPT[0], PAY_SCRIPT[1], after_pay]
    for action in ("result", "abort"):
        faults = Faults(fail_before_commit=1, reconcile_unreachable=1)
        # Attempt 1 fails before commit; attempt 2 cannot reconcile: the run parks.
        db = tmp_path / f"{action}.db"
        opened = open_payer(
            client, task_queue, db, faults=faults, script=script, until=UNCLEAR, **PAY
        )
        async with opened as run:
            handle, payments = run.handle, run.payments
            await runs.resolve(
                client,
                handle.id,
                Resolution(
                    step_id=PAY_STEP,
                    action=action,  # type: ignore[arg-type]
                    result='{"paid": "by phone"}',
                    reviewer="ops",
                    reason="checked with the bank",
                ),
            )
            result = await handle.result()
        record = pay_record(result)
        assert record.status == ("completed" if action == "result" else "aborted")
        if action == "result":
            assert record.summary.startswith("resolved by ops (checked with the bank):")
        assert payments.count() == 0
        assert faults.executions == 1
    assert seen[0] == ('{"paid": "by phone"}', False)
    assert seen[1][1] and "abandoned" in seen[1][0] and "ops (checked with the bank)" in seen[1][0]


async def test_effect_past_its_timeout_is_stopped_before_the_retry_reconciles(
    client: Client, task_queue: str
) -> None:
    """The torture test's seed 1: a slow first try wrote after the second had looked it up.

    The worker hears of a timed-out attempt from a heartbeat reply; heartbeats are throttled to
    0.8 x the heartbeat timeout (2s here), so the reply after the 3s timeout comes at about 4.2s,
    after the retry (about 3.1s) has asked the bank.
    """
    slow = FAST.model_copy(update={"tool_heartbeat_timeout": timedelta(seconds=2)})
    rows: list[tuple[str, int]] = []  # a bank that does not deduplicate
    looked_up = asyncio.Event()

    @tool("effect", timeout=timedelta(seconds=3))
    async def pay(args: PayArgs, ctx: ToolContext) -> dict:
        """Pay someone; the first try hangs until the retry has asked the bank."""
        assert ctx.effect_key
        if ctx.attempt == 1:
            await asyncio.wait_for(looked_up.wait(), timeout=20)
        rows.append((ctx.effect_key, ctx.attempt))
        return {"paid": args.amount}

    @pay.reconcile
    async def _find(args: PayArgs, ctx: ToolContext) -> dict | None:
        found = next(({"paid": args.amount} for k, _ in rows if k == ctx.effect_key), None)
        looked_up.set()
        return found

    agent = Agent(
        name="payer",
        model="claude-sonnet-4-6",
        system="You pay people.",
        tools=[pay],
        script=[reply(tool_use("pay", payee="ada", amount=5)), reply(text("Paid."))],
    )
    async with running_worker(client, [agent], task_queue):
        handle = await runs.start_run(client, "payer", "pay", task_queue=task_queue, options=slow)
        result = await handle.result()
    record = next(r for r in result.ledger if r.step_id == "t1.tool.1.pay")
    assert (record.status, record.attempt, record.reconciled) == ("completed", 2, False)
    assert rows == [(record.effect_key, 2)]
