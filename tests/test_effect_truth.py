"""An effect that may have happened is never reported failed: it is reconciled or parked.

The dropped-response scenario: the tool commits downstream, then its response is lost, on every
attempt. Only `EffectNotApplied`, raised by the tool, goes back to the model as a failure.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from pydantic import BaseModel
from temporalio.client import Client

from tests.agents import PAY_SCRIPT, Faults, Payments, build_agent
from tests.conftest import running_worker, wait_for_state
from waypoint._agent import Agent
from waypoint._tools import ToolContext, tool
from waypoint.client import runs
from waypoint.errors import EffectNotApplied
from waypoint.protocol import ModelRequest, ModelResponse, Resolution, RunResult, StepOptions
from waypoint.testing import last_tool_results, reply, text, tool_use

PAY_STEP = "t2.tool.1.pay"
ALWAYS = 1_000
"""A fault counter that never runs out during a test."""


def options(max_attempts: int | None = None) -> StepOptions:
    """Fast retries; `max_attempts` None keeps the default number of tries."""
    fast = StepOptions(
        retry_initial_interval=timedelta(milliseconds=50),
        retry_max_interval=timedelta(milliseconds=100),
    )
    if max_attempts is None:
        return fast
    return fast.model_copy(update={"tool_max_attempts": max_attempts})


def record(result: RunResult, step_id: str = PAY_STEP):  # type: ignore[no-untyped-def]
    return next(r for r in result.ledger if r.step_id == step_id)


def seen_by_model(seen: list[tuple[str, bool]]):  # type: ignore[no-untyped-def]
    """A script entry that keeps the tool result the model read, then ends the run."""

    def after(request: ModelRequest) -> ModelResponse:
        (result,) = last_tool_results(request)
        seen.append((str(result.content), result.is_error))
        return reply(text("done"))

    return after


async def test_response_lost_on_every_attempt_is_reconciled_never_failed(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    for max_attempts in (1, None):
        faults = Faults(lose_response=ALWAYS)
        payments = Payments(tmp_path / f"pay-{max_attempts}.db", faults)
        seen: list[tuple[str, bool]] = []
        agent = build_agent(payments, [*PAY_SCRIPT[:2], seen_by_model(seen)])
        async with running_worker(client, [agent], task_queue):
            handle = await runs.start_run(
                client, "payer", "pay", task_queue=task_queue, options=options(max_attempts)
            )
            result = await handle.result()
        pay = record(result)
        assert (pay.status, pay.reconciled) == ("completed", True), max_attempts
        assert payments.count() == 1 and payments.count(pay.effect_key) == 1
        assert faults.executions == 1  # the retry (or the last lookup) asked, never re-paid
        ((content, is_error),) = seen
        assert not is_error and '"payee": "ada"' in content


async def test_lookup_failing_too_parks_the_run_until_an_operator_resolves_it(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    faults = Faults(lose_response=ALWAYS, reconcile_unreachable=ALWAYS)
    payments = Payments(tmp_path / "pay.db", faults)
    agent = build_agent(payments, PAY_SCRIPT)
    async with running_worker(client, [agent], task_queue):
        handle = await runs.start_run(
            client, "payer", "pay", task_queue=task_queue, options=options(1)
        )
        status = await wait_for_state(client, handle.id, "needs_reconciliation")
        (unclear,) = status.unresolved
        assert unclear.step_id == PAY_STEP
        assert "bank lookup unreachable" in unclear.reason and unclear.effect_key
        parked = next(r for r in await runs.ledger(client, handle.id) if r.step_id == PAY_STEP)
        assert parked.status == "needs_reconciliation"
        faults.reconcile_unreachable = 0  # the bank's lookup is back
        await runs.resolve(
            client, handle.id, Resolution(step_id=PAY_STEP, action="retry", reviewer="ops")
        )
        result = await handle.result()
    pay = record(result)
    assert (pay.status, pay.reconciled) == ("completed", True)
    assert pay.decided_by and pay.decided_by.startswith("ops")
    assert payments.count() == 1 and faults.executions == 1
    assert result.output == "Paid ada 5."


class NoteArgs(BaseModel):
    text: str


def notifier(payments: Payments, raises: type[Exception], script: list) -> tuple[Agent, list[int]]:
    """An idempotent effect with no reconcile: it commits (deduplicated), then raises."""
    executions: list[int] = []

    @tool("effect", idempotent=True, max_attempts=2)
    async def notify(args: NoteArgs, ctx: ToolContext) -> str:
        """Send a note."""
        assert ctx.effect_key
        executions.append(ctx.attempt)
        if raises is EffectNotApplied:
            raise EffectNotApplied("the mail server refused the note; nothing was sent")
        payments.pay(ctx.effect_key, args.text, 1)
        raise raises("sent, but the reply was lost")

    agent = Agent(
        name="notifier", model="claude-sonnet-4-6", system="notify", tools=[notify], script=script
    )
    return agent, executions


async def test_idempotent_effect_without_reconcile_parks_when_its_tries_run_out(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    payments = Payments(tmp_path / "notes.db")
    script = [reply(tool_use("notify", text="hi")), reply(text("noted"))]
    agent, executions = notifier(payments, TimeoutError, script)
    async with running_worker(client, [agent], task_queue):
        handle = await runs.start_run(
            client, "notifier", "note", task_queue=task_queue, options=options()
        )
        status = await wait_for_state(client, handle.id, "needs_reconciliation")
        (unclear,) = status.unresolved
        assert unclear.step_id == "t1.tool.1.notify" and "idempotent" in unclear.reason
        await runs.resolve(
            client,
            handle.id,
            Resolution(step_id=unclear.step_id, action="result", result="sent", reviewer="ops"),
        )
        result = await handle.result()
    note = record(result, "t1.tool.1.notify")
    assert note.status == "completed" and note.summary.startswith("resolved by ops")
    assert executions == [1, 2]  # the tool's own max_attempts=2
    assert payments.count() == 1
    assert result.output == "noted"


async def test_effect_not_applied_goes_back_to_the_model_as_a_failure(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    payments = Payments(tmp_path / "notes.db")
    seen: list[tuple[str, bool]] = []
    script = [reply(tool_use("notify", text="hi")), seen_by_model(seen)]
    agent, executions = notifier(payments, EffectNotApplied, script)
    async with running_worker(client, [agent], task_queue):
        handle = await runs.start_run(
            client, "notifier", "note", task_queue=task_queue, options=options()
        )
        result = await handle.result()
    note = record(result, "t1.tool.1.notify")
    assert (note.status, note.reconciled) == ("error", False)
    ((content, is_error),) = seen
    assert is_error and "nothing happened" in content and "refused the note" in content
    assert executions == [1]  # not retried
    assert payments.count() == 0
