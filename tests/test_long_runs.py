"""Long runs: bounded history through continue-as-new, large payloads outside history, limits and
approvals that wait."""

from __future__ import annotations

import asyncio
import sqlite3
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

from pydantic import BaseModel
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from tests.agents import Payments, build_agent, long_script, with_tools
from tests.conftest import SMALL_HISTORY, running_worker, wait_for_state
from tests.support.clients import default_store_client
from tests.support.history import start_bounded
from waypoint._agent import Agent
from waypoint._tools import ToolContext, tool
from waypoint.client import runs
from waypoint.protocol import (
    Escalation,
    HistoryLimits,
    Limits,
    ModelRequest,
    RunResult,
    StepOptions,
    StepRecord,
)
from waypoint.stores.payloads import ContentAddressedFileDriver
from waypoint.testing import reply, text, tool_use

FAST = StepOptions(retry_initial_interval=timedelta(milliseconds=50))


def essence(result: RunResult, ledger: list[StepRecord]) -> tuple[str, list[str]]:
    """The output and the model/tool steps, compaction aside."""
    steps = [r.step_id for r in ledger if ".compact" not in r.step_id]
    return result.output, steps


async def test_continue_as_new_keeps_result_ledger_and_effects(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    turns = 15
    results, ledgers = {}, {}
    for name, budget in (("whole", HistoryLimits()), ("segmented", SMALL_HISTORY)):
        payments = Payments(tmp_path / f"{name}.db")
        agent = build_agent(payments, long_script(turns), limits=Limits(max_turns=50))
        async with running_worker(client, [agent], task_queue, max_cached_workflows=0) as model:
            handle = await start_bounded(client, f"long-{name}-{task_queue}", task_queue, budget)
            results[name] = await handle.result()
            status = await runs.status(client, handle.id)
        # The whole ledger: what the last segment carried, and what earlier ones archived.
        ledgers[name], note = await runs.whole_ledger(client, handle.id, results[name].ledger)
        assert note == ""
        turn_calls = [c for c in model.calls if ".compact" not in c]
        assert turn_calls == [f"t{i}.model" for i in range(1, turns + 1)]  # none paid twice
        keys = [r.effect_key for r in results[name].ledger if r.effect_key]
        assert len(keys) == 4  # turns 3, 6, 9 and 12 pay
        assert all(payments.count(k) == 1 for k in keys)
        assert payments.count() == len(keys)
        if name == "whole":
            assert status.continues == 0
        else:
            assert status.continues >= 2
            compactions = [r for r in ledgers[name] if r.step_id.endswith(".compact")]
            assert len(compactions) == status.continues
            assert all(r.status == "completed" and "summarised" in r.summary for r in compactions)
            # Effect keys survive the handovers: all from the first run of the chain.
            first_run = {k.split("/")[1] for k in keys}
            assert len(first_run) == 1
    assert essence(results["whole"], ledgers["whole"]) == essence(
        results["segmented"], ledgers["segmented"]
    )


async def test_signal_during_handover_and_approval_after_it_are_not_lost(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    payments = Payments(tmp_path / "p.db")
    script = long_script(9, pay_every=100)
    script[7] = reply(tool_use("pay", payee="late", amount=8))  # turn 8 needs approval
    agent = build_agent(payments, script, approval=True, limits=Limits(max_turns=6))
    async with running_worker(client, [agent], task_queue) as model:
        model.latency = 0.3  # keeps the compaction step open long enough to signal into it
        handle = await start_bounded(client, f"handover-{task_queue}", task_queue, SMALL_HISTORY)
        for _ in range(400):
            ledger = await runs.ledger(client, handle.id)
            if any(r.step_id.endswith(".compact") and r.status == "scheduled" for r in ledger):
                break
            await asyncio.sleep(0.02)
        else:
            raise AssertionError("no compaction started")
        await handle.signal("raise_limits", Limits(max_turns=20))
        status = await wait_for_state(client, handle.id, "awaiting_approval")
        assert status.continues >= 1
        (pending,) = status.pending_approvals
        assert pending.step_id == "t8.tool.1.pay"
        await runs.approve(client, handle.id, pending.step_id, reviewer="me")
        result = await handle.result()
    assert result.output == "done after 9 turns"
    assert payments.count() == 1


async def test_resume_budget_parks_the_run_until_raised(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    payments = Payments(tmp_path / "p.db")
    limits = Limits(max_turns=50, max_continue_as_new=1)
    agent = build_agent(payments, long_script(15), limits=limits)
    async with running_worker(client, [agent], task_queue):
        handle = await start_bounded(client, f"budget-{task_queue}", task_queue, SMALL_HISTORY)
        status = await wait_for_state(client, handle.id, "limit_reached")
        assert "max_continue_as_new=1 reached" in status.detail
        await handle.signal("raise_limits", Limits(max_turns=50, max_continue_as_new=10))
        result = await handle.result()
    assert result.output == "done after 15 turns"


async def test_token_budget_parks_before_a_call_that_could_cross_it_and_resumes(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    payments = Payments(tmp_path / "p.db")
    agent = build_agent(payments, long_script(4), limits=Limits(max_total_tokens=1))
    async with running_worker(client, [agent], task_queue) as model:
        handle = await runs.start_run(client, "payer", "go", task_queue=task_queue)
        status = await wait_for_state(client, handle.id, "limit_reached")
        assert "max_total_tokens=1 would be crossed: t1.model" in status.detail
        assert status.turn == 1 and model.calls == []  # parked before the call, not after
        await handle.signal("raise_limits", Limits(max_total_tokens=10**9))
        assert (await handle.result()).output == "done after 4 turns"


class BigArgs(BaseModel):
    size: int


async def test_three_mib_tool_result_goes_to_the_payload_store(
    env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    client = await default_store_client(env, store)

    @tool("read")
    async def dump(args: BigArgs) -> str:
        """Return a large document."""
        return "x" * args.size

    script = [reply(tool_use("dump", size=3 * 1024 * 1024)), reply(text("read it"))]
    agent = Agent(name="big", model="claude-sonnet-4-6", system="s", tools=[dump], script=script)
    async with running_worker(client, [agent], task_queue):
        handle = await runs.start_run(client, "big", "read", task_queue=task_queue)
        result = await handle.result()
    assert result.output == "read it"
    largest = 0
    async for event in handle.fetch_history_events():
        largest = max(largest, event.ByteSize())
    assert largest < 256 * 1024
    assert ContentAddressedFileDriver(store).stored_bytes() > 3 * 1024 * 1024


def notifications(path: Path) -> list[tuple[str, int]]:
    with sqlite3.connect(path) as db:
        return db.execute("SELECT effect_key, reminder FROM notes ORDER BY reminder").fetchall()


def escalating_agent(payments: Payments, notes: Path, policy: str) -> Agent:
    agent = build_agent(
        payments,
        [reply(tool_use("pay", payee="ada", amount=5)), reply(text("finished"))],
    )
    with sqlite3.connect(notes) as db:
        db.execute("CREATE TABLE IF NOT EXISTS notes (effect_key TEXT PRIMARY KEY, reminder INT)")

    @tool("effect", idempotent=True)
    async def notify_compliance(args: Escalation, ctx: ToolContext) -> str:
        """Tell compliance an approval is waiting."""
        with sqlite3.connect(notes) as db:
            db.execute("INSERT OR IGNORE INTO notes VALUES (?, ?)", (ctx.effect_key, args.reminder))
        return f"notified about {args.step_id} after {args.waited_seconds:.1f}s"

    pay = next(t for t in agent.tools if t.name == "pay")
    pay.options = replace(
        pay.options,
        requires_approval=True,
        approval_timeout=timedelta(milliseconds=500),
        on_approval_timeout=policy,
        escalate_with="notify_compliance" if policy == "escalate" else None,
        remind_every=timedelta(milliseconds=500),
    )
    return with_tools(agent, notify_compliance)


async def test_approval_timeout_rejects_and_the_model_is_told(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    payments = Payments(tmp_path / "p.db")
    agent = escalating_agent(payments, tmp_path / "notes.db", "reject")
    async with running_worker(client, [agent], task_queue):
        handle = await runs.start_run(client, "payer", "pay", task_queue=task_queue)
        result = await handle.result()
    pay = next(r for r in result.ledger if r.step_id == "t1.tool.1.pay")
    assert pay.status == "rejected" and "rejected by timeout: no decision within" in pay.summary
    assert payments.count() == 0


async def test_approval_timeout_escalates_and_reminds_until_approved(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    payments = Payments(tmp_path / "p.db")
    notes = tmp_path / "notes.db"
    agent = escalating_agent(payments, notes, "escalate")
    async with running_worker(client, [agent], task_queue):
        handle = await runs.start_run(client, "payer", "pay", task_queue=task_queue)
        for _ in range(200):
            if len(notifications(notes)) >= 3:
                break
            await asyncio.sleep(0.05)
        await runs.approve(client, handle.id, "t1.tool.1.pay", reviewer="late")
        result = await handle.result()
    sent = notifications(notes)
    assert [r for _, r in sent][:3] == [0, 1, 2]
    assert len({k for k, _ in sent}) == len(sent)
    assert sent[0][0].endswith("/t1.tool.1.pay.escalate.0")
    assert payments.count() == 1
    escalations = [r for r in result.ledger if ".escalate." in r.step_id]
    assert len(escalations) == len(sent) and all(r.status == "completed" for r in escalations)


async def test_model_steps_send_only_new_messages_and_survive_a_lost_store(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    payments = Payments(tmp_path / "p.db")
    agent = build_agent(payments, long_script(4, pay_every=3), approval=True)
    async with running_worker(client, [agent], task_queue):  # transcript store in memory
        handle = await runs.start_run(client, "payer", "go", task_queue=task_queue)
        await wait_for_state(client, handle.id, "awaiting_approval")
    async with running_worker(client, [agent], task_queue) as fresh:  # lost the store
        await runs.approve(client, handle.id, "t3.tool.2.pay", reviewer="me")
        result = await handle.result()
    assert result.output == "done after 4 turns"
    assert fresh.calls == ["t4.model"]  # paid once, though its first attempt lacked the store
    (t4,) = [r for r in fresh.requests if r.step_id == "t4.model"]
    assert len(t4.messages) == 7  # the provider saw the whole transcript
    sent: dict[str, int] = {}
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attrs = event.activity_task_scheduled_event_attributes
            if attrs.activity_type.name == "waypoint.call_model":
                (payload,) = attrs.input.payloads
                request = ModelRequest.model_validate_json(payload.data)
                sent[attrs.activity_id] = len(request.messages)
    by_step = {
        k.split("#")[0] + ("~" + k.split("~")[1] if "~" in k else ""): v for k, v in sent.items()
    }
    assert by_step["t1.model"] == 1
    assert by_step["t2.model"] == by_step["t3.model"] == 2  # only what is new
    assert by_step["t4.model"] == 2 and by_step["t4.model~1"] == 7  # resent in full once
