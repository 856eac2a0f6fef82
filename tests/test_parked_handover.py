"""A parked run continues-as-new at its history budget and goes on parked where it was.

Real dev server, real workers, real SQLite downstreams, the local Messages API server: a run
parked in an outage, on an unclear effect, on a changed tool, or by a pause holding an approved
call, is flooded with refused decisions until it hands over (twice); each park shows the same
state and detail in its new segment, nothing is called, run or paid again meanwhile, and the
verb that ends the park ends it as it would have before the handover.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle, WorkflowUpdateFailedError
from temporalio.service import RPCError

import waypoint.testing as scripted
from tests.agents import PAY_SCRIPT, Faults, Payments, build_agent, with_changed_pay
from tests.conftest import Claude, running_worker, wait_for_state
from tests.fake_messages_api import FakeMessagesAPI, text, tool_use
from tests.support.history import flood_until_handed_over
from tests.support.payer import open_payer
from tests.test_waiting_handover import BUDGET, segments
from waypoint._agent import Agent
from waypoint._tools import ToolContext, tool
from waypoint.client import runs
from waypoint.protocol import (
    ApprovalDecision,
    HistoryLimits,
    LimitsOverride,
    Resolution,
    ResumeRequest,
    StepOptions,
)

STEP = "t2.tool.1.pay"
ASKED, UNCLEAR = "awaiting_approval", "needs_reconciliation"
FRESH = {"max_cached_workflows": 0}
"""Every task replays the run from its history."""
FAST = StepOptions(
    retry_initial_interval=timedelta(milliseconds=50),
    retry_max_interval=timedelta(milliseconds=100),
)


SMALL = {"history": BUDGET, "options": FAST}
"""How these tests start the payer: a small history budget, quick retries."""


async def refused(handle: WorkflowHandle[Any, Any], rounds: int) -> None:
    """Decisions for steps that do not wait: each refused and recorded, none changes the run."""
    for i in range(rounds):
        wrong = ApprovalDecision(step_id=f"t9.tool.{i}.nope", reviewer="ops")
        await handle.signal("approve", wrong)


async def handed_over(handle: WorkflowHandle[Any, Any], first: str) -> str:
    """Flood the run until it runs in a later segment than `first`; that segment's run id."""
    return await flood_until_handed_over(handle, first, lambda _: refused(handle, 8))


async def twice(handle: WorkflowHandle[Any, Any]) -> None:
    """Hand the parked run over, and again from its resumed park."""
    first = (await handle.describe()).run_id or ""
    await handed_over(handle, await handed_over(handle, first))


async def soon(ready: Callable[[], Awaitable[bool]]) -> None:
    """Wait until `ready()` says so (a minute at most: CI may be busy)."""
    for _ in range(3000):
        if await ready():
            return
        await asyncio.sleep(0.02)
    raise AssertionError("not ready in a minute")


async def continued(client: Client, run: str) -> bool:
    """Whether the run's ledger holds `t1.model.cont1`: t1.model ended, its sequel began."""
    return any(r.step_id == "t1.model.cont1" for r in await runs.ledger(client, run))


async def worked_after(client: Client, handle: WorkflowHandle[Any, Any], run_id: str) -> list[str]:
    """Activities the segments after `run_id` scheduled, but for their history size checks."""
    found, later = [], [r for r, _ in await segments(client, handle)]
    for segment in later[later.index(run_id) + 1 :]:
        at = client.get_workflow_handle(handle.id, run_id=segment)
        async for e in at.fetch_history_events():
            if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                scheduled = e.activity_task_scheduled_event_attributes
                if scheduled.activity_type.name != "waypoint.history_size":
                    found.append(f"{scheduled.activity_type.name} {scheduled.activity_id}")
    return found


async def parked_in(handle: WorkflowHandle[Any, Any]) -> str:
    """The run id of the segment the run is parked in now."""
    return (await handle.describe()).run_id or ""


def down(client: Client, task_queue: str, tmp_path: Path, model: Any, history: Any = BUDGET) -> Any:
    """The payer on `model` (the scripted API), waited for until a model step parks down."""
    worker = {"claude": model, "max_cached_workflows": 0}
    db, until = tmp_path / "p.db", "model_unavailable"
    return open_payer(
        client, task_queue, db, script=[], until=until, worker=worker, history=history, options=FAST
    )


async def handed_twice(client: Client, handle: WorkflowHandle[Any, Any]) -> tuple[str, Any]:
    """Hand the parked run over twice: the segment it parked in, and its status parked again."""
    at = await parked_in(handle)
    await twice(handle)
    return at, await wait_for_state(client, handle.id, "model_unavailable")


@pytest.mark.parametrize(
    ("status", "message", "state"),
    [
        (401, "invalid x-api-key", "model_unavailable"),
        (400, "roles must alternate", "request_invalid"),
    ],
)
async def test_a_parked_model_step_is_handed_over_and_called_once_after_resume(
    client: Client,
    task_queue: str,
    tmp_path: Path,
    api: FakeMessagesAPI,
    claude: Claude,
    status: int,
    message: str,
    state: str,
) -> None:
    api.enqueue_message(tool_use("pay", {"payee": "ada", "amount": 5}))
    api.enqueue_error(status, message=message)
    api.enqueue_message(text("Paid ada 5."))
    worker = {"claude": claude(api), "max_cached_workflows": 0}
    opened = open_payer(
        client, task_queue, tmp_path / "p.db", script=[], until=state, worker=worker, **SMALL
    )
    async with opened as run:
        handle, payments, parked = run.handle, run.payments, run.status
        at = await parked_in(handle)
        await twice(handle)
        again = await wait_for_state(client, handle.id, state)
        ledger = await runs.ledger(client, handle.id)
        assert len(api.message_requests) == 2  # t1.model, and t2.model's one failed call
        assert not await worked_after(client, handle, at)  # not called again
        await handle.signal("resume", ResumeRequest(reviewer="ops"))
        result = await handle.result()
    assert parked is not None and message in parked.detail, parked
    assert again.detail == parked.detail, (parked, again)
    (line,) = [r for r in ledger if r.step_id == "t2.model"]
    assert line.summary.startswith("parked:") and message in line.summary, line
    assert result.state == "done" and result.output == "Paid ada 5.", result
    assert len(api.message_requests) == 3  # retried once, after the resume
    assert [r.step_id for r in result.ledger if r.kind == "model"] == ["t1.model", "t2.model"]
    assert payments.count() == 1
    assert len(await segments(client, handle)) >= 3


async def test_a_model_step_held_by_a_pause_is_handed_over_and_called_once_unpaused(
    client: Client, task_queue: str, tmp_path: Path, api: FakeMessagesAPI, claude: Claude
) -> None:
    """Paused while t1.model streams a paused turn: its continuation waits, not called."""
    api.enqueue_message(text("Checking"), stop_reason="pause_turn", event_delay=0.5)
    api.enqueue_message(text("Done."))
    worker = {"claude": claude(api), "max_cached_workflows": 0}
    async with open_payer(
        client, task_queue, tmp_path / "p.db", script=[], worker=worker, **SMALL
    ) as run:
        handle = run.handle
        await soon(lambda: asyncio.sleep(0, bool(api.message_requests)))  # t1.model streams
        await runs.pause(client, handle.id, reviewer="ops", reason="incident 10")
        held = await wait_for_state(client, handle.id, "paused")
        await soon(lambda: continued(client, handle.id))  # t1.model ended, its sequel held
        at = await parked_in(handle)
        await twice(handle)
        again = await wait_for_state(client, handle.id, "paused")
        assert len(api.message_requests) == 1 and again.detail == held.detail, again
        assert not await worked_after(client, handle, at)
        await runs.unpause(client, handle.id, reviewer="ops")
        result = await handle.result()
    assert result.state == "done" and len(api.message_requests) == 2, result
    model = [r.step_id for r in result.ledger if r.kind == "model"]
    assert model == ["t1.model", "t1.model.cont1"], model


async def test_an_unclear_effect_is_handed_over_and_the_operator_resolves_it_once(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    faults = Faults(lose_response=1, reconcile_unreachable=1)  # paid, then nobody can tell
    opened = open_payer(
        client, task_queue, tmp_path / "p.db", faults=faults, until=UNCLEAR, worker=FRESH, **SMALL
    )
    async with opened as run:
        handle, payments, model, parked = run.handle, run.payments, run.model, run.status
        assert parked is not None
        at = await parked_in(handle)
        await twice(handle)
        again = await wait_for_state(client, handle.id, UNCLEAR)
        assert not await worked_after(client, handle, at)  # not run, not looked up again
        assert faults.executions == 1 and payments.count() == 1 and len(model.requests) == 2
        retry = Resolution(step_id=STEP, action="retry", reviewer="ops")
        receipt = await runs.resolve(client, handle.id, retry)
        assert receipt.recorded, receipt
        result = await handle.result()
    assert again.unresolved == parked.unresolved and again.detail == parked.detail, again
    (unclear,) = again.unresolved
    assert unclear.step_id == STEP and "bank lookup unreachable" in unclear.reason
    (line,) = [r for r in result.ledger if r.step_id == STEP]
    assert (line.status, line.reconciled) == ("completed", True), line  # found, not paid again
    assert faults.executions == 1 and payments.count(line.effect_key) == 1
    assert result.output == "Paid ada 5." and len(model.requests) == 3


async def test_a_step_parked_on_a_changed_tool_is_handed_over_and_resume_runs_it_once(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    opened = open_payer(client, task_queue, tmp_path / "p.db", approval=True, until=ASKED, **SMALL)
    async with opened as run:
        handle, payments, original = run.handle, run.payments, run.agent
    changed = with_changed_pay(build_agent(payments, PAY_SCRIPT), payments, "refuse")
    async with running_worker(client, [changed], task_queue, **FRESH):
        await runs.approve(client, handle.id, STEP, reviewer="me")
        parked = await wait_for_state(client, handle.id, "tool_changed")
        at = await parked_in(handle)
        await twice(handle)
        again = await wait_for_state(client, handle.id, "tool_changed")
        assert not await worked_after(client, handle, at)  # neither checked nor run again
    assert again.detail == parked.detail and parked.detail.startswith(f"step {STEP}: tool 'pay'")
    assert payments.count() == 0
    async with running_worker(client, [original], task_queue) as model:  # rolled back
        await handle.signal("resume", ResumeRequest(reviewer="ops"))
        result = await handle.result()
    (line,) = [r for r in result.ledger if r.step_id == STEP]  # approved once, not asked again
    assert (result.state, line.status, payments.count()) == ("done", "completed", 1), result
    assert (line.decided_by or "").startswith("me"), line
    assert len(model.requests) == 1  # only the turn after the payment


async def test_an_approved_call_held_by_a_pause_is_handed_over_and_runs_once_unpaused(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    opened = open_payer(
        client, task_queue, tmp_path / "p.db", approval=True, until=ASKED, worker=FRESH, **SMALL
    )
    async with opened as run:
        handle, payments, scripted = run.handle, run.payments, run.model
        await runs.pause(client, handle.id, reviewer="ops", reason="incident 9")
        approved = await runs.approve(client, handle.id, STEP, reviewer="ada")
        assert approved.detail == "approved; the call runs once the run is unpaused", approved
        held = await wait_for_state(client, handle.id, "paused")
        at = await parked_in(handle)
        await twice(handle)
        again = await wait_for_state(client, handle.id, "paused")
        assert again.detail == held.detail == "paused by ops: incident 9", again
        assert not again.pending_approvals, again  # not asked again
        assert payments.count() == 0 and len(scripted.requests) == 2
        assert not await worked_after(client, handle, at)
        unpaused = await runs.unpause(client, handle.id, reviewer="ops", reason="fixed")
        assert unpaused.recorded, unpaused
        result = await handle.result()
    (line,) = [r for r in result.ledger if r.step_id == STEP]
    assert line.status == "completed" and (line.decided_by or "").startswith("ada"), line
    assert payments.count() == 1 and len(scripted.requests) == 3
    assert result.state == "done"


async def test_an_update_pinned_to_a_segment_that_handed_over_is_refused_and_loses_nothing(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    opened = open_payer(client, task_queue, tmp_path / "p.db", approval=True, until=ASKED, **SMALL)
    async with opened as run:
        handle, payments = run.handle, run.payments
        first = (await handle.describe()).run_id or ""
        await handed_over(handle, first)
        old = client.get_workflow_handle(handle.id, run_id=first)
        decision = ApprovalDecision(step_id=STEP, reviewer="ada")
        with pytest.raises((RPCError, WorkflowUpdateFailedError)) as refused_err:
            await old.execute_update("approve", decision)
        assert (
            "completed" in str(refused_err.value).lower()
            or "not found" in str(refused_err.value).lower()
        ), refused_err.value
        assert (await wait_for_state(client, handle.id, "awaiting_approval")).pending_approvals
        receipt = await runs.approve(client, handle.id, STEP, reviewer="ada")
        assert receipt.recorded and receipt.runs is True, receipt
        result = await handle.result()
    (line,) = [r for r in result.ledger if r.step_id == STEP]
    assert line.status == "completed" and payments.count() == 1


async def test_a_step_parked_on_a_full_context_window_is_handed_over_and_asked_again_once(
    client: Client, task_queue: str, tmp_path: Path, api: FakeMessagesAPI, claude: Claude
) -> None:
    """t1.model answers that the context window is full, with nothing to compact: it parks."""
    api.enqueue_message(text("So far"), stop_reason="model_context_window_exceeded")
    api.enqueue_message(text("Done."))
    async with down(client, task_queue, tmp_path, claude(api)) as run:
        handle, parked = run.handle, run.status
        at, again = await handed_twice(client, handle)
        assert len(api.message_requests) == 1  # t1.model, paid once, not asked again
        assert not await worked_after(client, handle, at)
        await handle.signal("resume", ResumeRequest(reviewer="ops"))
        result = await handle.result()
    assert parked is not None and "context window" in parked.detail, parked
    assert again.detail == parked.detail, (parked, again)
    assert result.state == "done" and result.output == "Done.", result
    assert len(api.message_requests) == 2  # asked again once, after the resume
    model = [r for r in result.ledger if r.kind == "model"]
    assert [r.step_id for r in model] == ["t1.model", "t1.model.c1"], model
    assert model[0].tokens and model[0].status == "completed", model[0]
    assert len(await segments(client, handle)) >= 3


@pytest.mark.parametrize(
    ("filled", "history", "summary", "then"),
    [  # t3.model fills the context window; each turn fills a tiny history budget
        (True, BUDGET, "t3.compact.ctx", "t3.model.c1"),
        (False, HistoryLimits(max_events=10, keep_recent_turns=1), "t2.compact", "t3.model"),
    ],
)
async def test_a_summary_step_parked_in_an_outage_is_handed_over_and_written_once_resumed(
    client: Client,
    task_queue: str,
    tmp_path: Path,
    api: FakeMessagesAPI,
    claude: Claude,
    filled: bool,
    history: HistoryLimits,
    summary: str,
    then: str,
) -> None:
    """The summary step finds the API down and parks: in t3 before t3.model is asked again,
    or in t2 before the continue-as-new its budget calls for (the run has handed over once)."""
    api.enqueue_message(tool_use("pay", {"payee": "ada", "amount": 5}))
    api.enqueue_message(tool_use("pay", {"payee": "bob", "amount": 7}))
    if filled:
        api.enqueue_message(text("So far"), stop_reason="model_context_window_exceeded")
    api.enqueue_error(401, message="invalid x-api-key")
    api.enqueue_message(text("Paid ada, in short."))
    api.enqueue_message(text("Done."))
    asked = 3 + filled  # the model steps before the summary, and its one failed call
    async with down(client, task_queue, tmp_path, claude(api), history) as run:
        payments, parked = run.payments, run.status
        first = run.handle.first_execution_run_id  # the latest segment, followed from the first
        handle = client.get_workflow_handle(run.handle.id, first_execution_run_id=first)
        at, again = await handed_twice(client, handle)
        assert len(api.message_requests) == asked
        assert not await worked_after(client, handle, at)  # neither the summary nor a turn
        await handle.signal("resume", ResumeRequest(reviewer="ops"))
        result = await run.handle.result()
    assert parked is not None and "invalid x-api-key" in parked.detail, parked
    assert again.detail == parked.detail, (parked, again)
    assert result.state == "done" and result.output == "Done.", result
    assert len(api.message_requests) == asked + 2  # the summary once resumed, then the step
    model = [r.step_id for r in result.ledger if r.kind == "model"]
    assert model[-2:] == [summary, then] and model.count(summary) == 1, model
    assert payments.count() == 2


async def test_a_summary_step_parked_at_a_limit_is_handed_over_and_written_once_raised(
    client: Client, task_queue: str, tmp_path: Path, api: FakeMessagesAPI, claude: Claude
) -> None:
    """t3.model reads 100,000 tokens and says the window is full; its summary's reservation
    would pass max_total_tokens, so the summary parks at the limit before it is called."""
    api.enqueue_message(tool_use("pay", {"payee": "ada", "amount": 5}))
    api.enqueue_message(tool_use("pay", {"payee": "bob", "amount": 7}))
    full = {"input_tokens": 100_000, "output_tokens": 10}
    api.enqueue_message(text("So far"), stop_reason="model_context_window_exceeded", usage=full)
    api.enqueue_message(text("Paid ada, in short."))
    api.enqueue_message(text("Done."))
    worker = {"claude": claude(api), "max_cached_workflows": 0}
    opened = open_payer(
        client, task_queue, tmp_path / "p.db", script=[], until="limit_reached", worker=worker,
        limits=LimitsOverride(max_total_tokens=60_000), **SMALL,
    )  # fmt: skip
    async with opened as run:
        handle, payments, parked = run.handle, run.payments, run.status
        at = await parked_in(handle)
        await twice(handle)
        again = await wait_for_state(client, handle.id, "limit_reached")
        assert len(api.message_requests) == 3 and not await worked_after(client, handle, at)
        await runs.resume(client, handle.id, reviewer="ops", max_total_tokens=10**9)
        result = await handle.result()
    assert parked is not None and "t3.compact.ctx" in parked.detail, parked
    assert again.detail == parked.detail, (parked, again)
    assert result.state == "done" and result.output == "Done.", result
    assert len(api.message_requests) == 5  # the summary once raised, then the step
    model = [r.step_id for r in result.ledger if r.kind == "model"]
    assert model[-2:] == ["t3.compact.ctx", "t3.model.c1"], model
    assert model.count("t3.compact.ctx") == 1 and payments.count() == 2


class City(BaseModel):
    city: str


class Town(BaseModel):
    town: str


def read(db: Path, what: str) -> None:
    """Count a read in the downstream's table (every read a row: nothing deduplicates)."""
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS reads (what TEXT)")
        conn.execute("INSERT INTO reads VALUES (?)", (what,))


def reads(db: Path, what: str) -> int:
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS reads (what TEXT)")
        return conn.execute("SELECT count(*) FROM reads WHERE what = ?", (what,)).fetchone()[0]


def reads_then_pays(db: Path, changed: bool = False) -> Agent:
    """`durability="turn"`: a payment waits for approval, then a reply of two reads runs as
    one local turn; `changed`: the `census` read's schema changed (a deploy), under refuse."""
    payments = Payments(db)

    @tool("read")
    async def weather(args: City) -> str:
        """Look up the weather."""
        read(db, f"weather {args.city}")
        return f"sunny in {args.city}"

    async def counted(town: str) -> str:
        read(db, f"census {town}")
        return f"1,000 people in {town}"

    @tool("read", name="census")
    async def census(args: City) -> str:
        """Count the people of a city."""
        return await counted(args.city)

    @tool("read", name="census")
    async def census_v2(args: Town) -> str:
        """Count the people of a town."""
        return await counted(args.town)

    @tool("effect", idempotent=True, requires_approval=True)
    async def pay(args: City, ctx: ToolContext) -> str:
        """Pay a city."""
        assert ctx.effect_key
        return str(payments.pay(ctx.effect_key, args.city, 5))

    return Agent(
        name="payer",
        model="claude-sonnet-4-6",
        system="You pay, then read.",
        tools=[weather, census_v2 if changed else census, pay],
        durability="turn",
        on_change="refuse",
        script=[
            scripted.reply(scripted.tool_use("pay", city="Oslo")),
            scripted.reply(
                scripted.tool_use("weather", city="Oslo"), scripted.tool_use("census", city="Oslo")
            ),
            scripted.reply(scripted.text("Done.")),
        ],
    )


async def test_a_read_parked_on_a_changed_tool_in_a_local_turn_is_handed_over_and_read_once(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    db = tmp_path / "p.db"
    payments = Payments(db)
    async with running_worker(client, [reads_then_pays(db)], task_queue, **FRESH):
        handle = await runs.start_run(client, "payer", "pay Oslo", task_queue=task_queue, **SMALL)
        await wait_for_state(client, handle.id, ASKED)
    async with running_worker(client, [reads_then_pays(db, changed=True)], task_queue, **FRESH):
        await runs.approve(client, handle.id, "t1.tool.1.pay", reviewer="me")
        parked = await wait_for_state(client, handle.id, "tool_changed")
        at = await parked_in(handle)
        await twice(handle)
        again = await wait_for_state(client, handle.id, "tool_changed")
        assert not await worked_after(client, handle, at)  # nothing read or run again
    assert again.detail == parked.detail and "t2.tool.2.census" in parked.detail, parked
    assert (reads(db, "weather Oslo"), reads(db, "census Oslo"), payments.count()) == (1, 0, 1)
    async with running_worker(client, [reads_then_pays(db)], task_queue) as model:  # rolled back
        await handle.signal("resume", ResumeRequest(reviewer="ops"))
        result = await handle.result()
    lines = {r.step_id: r.status for r in result.ledger if r.step_id.startswith("t2.tool")}
    assert lines == {"t2.tool.1.weather": "completed", "t2.tool.2.census": "completed"}, lines
    assert reads(db, "weather Oslo") == 1  # its carried result, not read again
    assert reads(db, "census Oslo") == 1 and result.state == "done", result
    assert len(model.requests) == 1  # only the turn after the reads
