"""A run that waits continues-as-new at its history budget and goes on waiting where it was.

Real dev server, real workers, real SQLite downstreams: a run waiting for an approval or an
answer is flooded with steers and refused signals until it hands over (more than once); the
approval it then gets runs the call once with the arguments reviewed, the answer reaches the
model, reminders go on numbered, and a timeout set before the handover fires when it was due.
"""

from __future__ import annotations

import asyncio
import sqlite3
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from temporalio.client import Client, WorkflowHandle
from temporalio.service import RPCError

from tests.agents import PAY_SCRIPT, Payments, build_agent
from tests.client_tool_app import asker
from tests.conftest import running_worker, start_continuing, wait_for_state
from tests.support.history import flood_until_handed_over
from waypoint.client import runs
from waypoint.errors import WaypointError
from waypoint.protocol import (
    ApprovalDecision,
    HistoryLimits,
    PendingApproval,
)

STEP = "t2.tool.1.pay"
BUDGET = HistoryLimits(max_events=120, keep_recent_turns=50)
MARGIN = 60
"""Events a segment may pass its budget by: the arrivals since the last size check, the
check itself, and the handover's own task."""


async def segments(client: Client, handle: WorkflowHandle[Any, Any]) -> list[tuple[str, int]]:
    """Each history segment of the run, first to last: its run id and its length."""
    run_id, found = handle.first_execution_run_id, []
    while run_id:
        events = [
            e
            async for e in client.get_workflow_handle(
                handle.id, run_id=run_id
            ).fetch_history_events()
        ]
        found.append((run_id, len(events)))
        run_id = next(
            (
                e.workflow_execution_continued_as_new_event_attributes.new_execution_run_id
                for e in events
                if e.HasField("workflow_execution_continued_as_new_event_attributes")
            ),
            "",
        )
    return found


async def pending(handle: WorkflowHandle[Any, Any]) -> list[PendingApproval]:
    """The run's pending approvals, as its worker says."""
    return await handle.query("pending_approvals", result_type=list[PendingApproval])


async def flood(client: Client, handle: WorkflowHandle[Any, Any], rounds: int) -> None:
    """What a busy team sends a waiting run: steers, and decisions for steps that do not wait."""
    for i in range(rounds):
        await runs.steer(client, handle.id, f"note {i}: the vendor called", reviewer="ops")
        wrong = ApprovalDecision(step_id=f"t9.tool.{i}.nope", reviewer="ops")
        await handle.signal("approve", wrong)  # refused, and recorded as refused


async def until_handed_over(handle: WorkflowHandle[Any, Any], first: str, client: Client) -> None:
    """Flood the run until it runs in a later segment than `first`."""
    await flood_until_handed_over(handle, first, lambda _: flood(client, handle, 5))


def paid(path: Path) -> list[tuple[str, str, int]]:
    with sqlite3.connect(path) as db:
        return db.execute("SELECT effect_key, payee, amount FROM payments").fetchall()


async def test_a_waiting_approval_is_handed_over_and_its_call_runs_once(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    payments = Payments(tmp_path / "p.db")
    agent = build_agent(payments, PAY_SCRIPT, approval=True)
    async with running_worker(client, [agent], task_queue, max_cached_workflows=0):
        handle = await start_continuing(
            client, f"waiting-{task_queue}", task_queue, "payer", "pay ada", BUDGET
        )
        await wait_for_state(client, handle.id, "awaiting_approval")
        (before,) = await pending(handle)
        first = (await handle.describe()).run_id
        await until_handed_over(handle, first, client)
        second = (await handle.describe()).run_id
        await until_handed_over(handle, second, client)  # and again, from a resumed wait
        status = await wait_for_state(client, handle.id, "awaiting_approval")
        (after,) = await pending(handle)
        assert after == before, (before, after)  # same step, arguments, hash and request time
        old = client.get_workflow_handle(handle.id, run_id=first)
        try:  # a decision pinned to a segment that handed over is refused, never lost
            await old.signal("approve", ApprovalDecision(step_id=STEP, reviewer="ada"))
        except RPCError as err:
            assert "completed" in str(err).lower(), err
        else:
            raise AssertionError("a signal to a closed segment was taken")
        receipt = await runs.approve(client, handle.id, STEP, reviewer="ada", reason="ok")
        assert receipt.recorded and receipt.runs is True, receipt
        assert receipt.detail == "approved; the call runs now", receipt
        result = await handle.result()
    assert status.state == "awaiting_approval"
    assert result.state == "done", result
    key = f"{handle.id}/{handle.first_execution_run_id}/{STEP}"
    assert paid(tmp_path / "p.db") == [(key, "ada", 5)]  # once, with the arguments reviewed
    lines = [r for r in result.ledger if r.step_id == STEP]
    assert len(lines) == 1 and lines[0].status == "completed", lines
    assert lines[0].decided_by and lines[0].decided_by.startswith("ada"), lines
    found = await segments(client, handle)
    assert len(found) >= 3, found
    assert all(length <= BUDGET.max_events + MARGIN for _, length in found[:-1]), found


async def test_updates_racing_a_handover_are_answered_or_refused_never_lost(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """Steers sent side by side as the run hands over: each one recorded that was answered."""
    payments = Payments(tmp_path / "p.db")
    agent = build_agent(payments, PAY_SCRIPT, approval=True)
    async with running_worker(client, [agent], task_queue):
        handle = await start_continuing(
            client, f"racing-{task_queue}", task_queue, "payer", "pay ada", BUDGET
        )
        await wait_for_state(client, handle.id, "awaiting_approval")

        async def steer(i: int) -> str:
            try:
                done = await runs.steer(client, handle.id, f"racer {i}", reviewer="ops")
            except WaypointError as err:  # refused clearly: the sender knows
                return f"refused: {err}"
            return "recorded" if done.recorded else "sent"

        said = await asyncio.gather(*(steer(i) for i in range(60)))
        await runs.approve(client, handle.id, STEP, reviewer="ada")
        result = await handle.result()
    assert len(await segments(client, handle)) >= 2
    taken = sum(1 for r in result.ledger if r.tool == "steer")
    assert taken == sum(1 for s in said if s != "refused" and not s.startswith("refused")), said
    assert payments.count() == 1


async def test_a_waiting_question_is_handed_over_and_its_answer_reaches_the_model(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    notes = tmp_path / "notes.db"
    agent = asker(notes, remind_every=timedelta(milliseconds=700))
    step = "t1.tool.1.ask_user"
    async with running_worker(client, [agent], task_queue, max_cached_workflows=0):
        handle = await start_continuing(
            client, f"asking-{task_queue}", task_queue, "asker", "pick", BUDGET
        )
        await wait_for_state(client, handle.id, "awaiting_answer")
        await reminded(notes, 1)
        first = (await handle.describe()).run_id
        await until_handed_over(handle, first, client)
        await wait_for_state(client, handle.id, "awaiting_answer")
        await reminded(notes, len(asker_notes(notes)) + 1)  # the next one, numbered on
        receipt = await runs.answer(client, handle.id, step, {"choice": "blue"}, reviewer="ada")
        assert receipt.recorded, receipt
        result = await handle.result()
    assert result.state == "done" and "User said" in result.output and "blue" in result.output
    ids = [r.step_id for r in result.ledger]
    assert len(ids) == len(set(ids)), ids  # no step twice: not the question, not a reminder
    reminders = sorted(n for _, n in asker_notes(notes))
    assert reminders == list(range(len(reminders))), reminders  # numbered on, none again
    assert len(await segments(client, handle)) >= 2


async def reminded(path: Path, count: int) -> None:
    """Wait until `count` distinct reminders were sent (one row per effect key)."""
    deadline = asyncio.get_running_loop().time() + 30
    while len(asker_notes(path)) < count:
        assert asyncio.get_running_loop().time() < deadline, asker_notes(path)
        await asyncio.sleep(0.05)


def asker_notes(path: Path) -> list[tuple[str, int]]:
    with sqlite3.connect(path) as db:
        return db.execute("SELECT effect_key, reminder FROM notes").fetchall()


async def test_an_approval_timeout_set_before_a_handover_fires_when_it_was_due(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    from tests.test_long_runs import escalating_agent

    payments = Payments(tmp_path / "p.db")
    agent = escalating_agent(payments, tmp_path / "notes.db", "reject")
    pay = next(t for t in agent.tools if t.name == "pay")
    timeout, late = timedelta(seconds=8), timedelta(seconds=3)
    pay.options = replace(pay.options, approval_timeout=timeout)
    step = "t1.tool.1.pay"
    async with running_worker(client, [agent], task_queue):
        handle = await start_continuing(
            client, f"timing-{task_queue}", task_queue, "payer", "pay", BUDGET
        )
        await wait_for_state(client, handle.id, "awaiting_approval")
        (asked,) = await pending(handle)
        requested = datetime.fromisoformat(asked.requested_at)
        first = (await handle.describe()).run_id
        # Hand over well into the wait: a deadline restarted there would fire `late` late.
        await asyncio.sleep(max(0.0, (requested + late - datetime.now(UTC)).total_seconds()))
        await until_handed_over(handle, first, client)
        result = await handle.result()
    (line,) = [r for r in result.ledger if r.step_id == step]
    assert line.status == "rejected" and line.decided_by == "timeout", line
    fired = datetime.fromisoformat(line.decided_at or "") - requested
    assert timeout <= fired < timeout + late - timedelta(seconds=0.5), fired  # not restarted
    handed_at = await _handed_at(client, handle, first)
    assert late <= handed_at - requested < timeout, "the handover came late in the wait"
    assert payments.count() == 0


async def _handed_at(client: Client, handle: WorkflowHandle[Any, Any], run_id: str) -> datetime:
    """When the segment `run_id` continued-as-new."""
    async for e in client.get_workflow_handle(handle.id, run_id=run_id).fetch_history_events():
        if e.HasField("workflow_execution_continued_as_new_event_attributes"):
            return e.event_time.ToDatetime().replace(tzinfo=UTC)
    raise AssertionError("no continue-as-new")
