"""Pause holds a run before its next step; unpause lets it go on where it stopped.

Real dev server, real workers: a paused run asks the model nothing and runs no tool; an
approval decided while it is paused is recorded and acted on after the unpause; a pause is
carried across continue-as-new; each verb is refused where it does not fit.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from tests.agents import PAY_SCRIPT, Payments, build_agent
from tests.cli import ROOT, waypoint
from tests.conftest import Claude, running_worker, wait_for_state
from tests.fake_messages_api import FakeMessagesAPI, text, tool_use
from tests.support.history import start_bounded
from tests.support.payer import open_payer
from waypoint.client import runs
from waypoint.errors import DecisionRefusedError, RunClosedError
from waypoint.protocol import HistoryLimits, Limits

STEP = "t2.tool.1.pay"


async def cli(env: WorkflowEnvironment, *args: str) -> subprocess.CompletedProcess[str]:
    """`waypoint ARGS` against the test server, off the loop the test's worker runs on."""
    target = env.client.service_client.config.target_host
    given = {**os.environ, "TEMPORAL_ADDRESS": target, "PYTHONPATH": str(ROOT)}
    return await asyncio.to_thread(waypoint, given, *args)


async def _scheduled(handle: object) -> list[str]:
    """The activity ids the run's current history scheduled, in order."""
    history = await handle.fetch_history()  # type: ignore[attr-defined]
    return [
        e.activity_task_scheduled_event_attributes.activity_id
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]


async def test_an_approval_decided_while_paused_is_recorded_and_runs_only_after_unpause(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    payments = Payments(tmp_path / "p.db")
    agent = build_agent(payments, PAY_SCRIPT, approval=True)
    async with running_worker(client, [agent], task_queue, max_cached_workflows=0) as scripted:
        handle = await runs.start_run(client, "payer", "pay ada", task_queue=task_queue)
        await wait_for_state(client, handle.id, "awaiting_approval")
        paused = await runs.pause(client, handle.id, reviewer="ops", reason="incident 7")
        assert paused.recorded and paused.step_id == "t2.operator.1", paused
        assert paused.decided_by.startswith("ops") and paused.decision == "paused"
        with pytest.raises(DecisionRefusedError, match="paused already"):
            await runs.pause(client, handle.id, reviewer="ops")
        waiting = await runs.status(client, handle.id)
        assert waiting.state == "awaiting_approval", waiting  # the approval still waits
        approved = await runs.approve(client, handle.id, STEP, reviewer="ada")
        assert approved.recorded and approved.runs is True, approved
        assert approved.detail == "approved; the call runs once the run is unpaused"
        held = await wait_for_state(client, handle.id, "paused")
        assert held.detail == "paused by ops: incident 7", held
        assert payments.count() == 0 and len(scripted.requests) == 2
        assert not [a for a in await _scheduled(handle) if a.startswith(STEP)]
        unpaused = await runs.unpause(client, handle.id, reviewer="ops", reason="fixed")
        assert unpaused.recorded and unpaused.step_id == "t2.operator.2", unpaused
        result = await handle.result()
        with pytest.raises(RunClosedError, match="nothing to unpause"):
            await runs.unpause(client, handle.id, reviewer="ops")
    assert payments.count() == 1 and len(scripted.requests) == 3
    lines = {r.step_id: r for r in result.ledger}
    assert lines["t2.operator.1"].tool == "pause" and "incident 7" in lines["t2.operator.1"].summary
    assert lines["t2.operator.2"].tool == "unpause"
    assert lines[STEP].status == "completed" and lines[STEP].decided_by.startswith("ada")
    order = [r.step_id for r in result.ledger]
    assert order.index("t2.operator.2") < order.index("t3.model")


async def test_a_pause_is_carried_across_continue_as_new_and_the_cli_unpauses_it(
    env: WorkflowEnvironment, client: Client, task_queue: str, tmp_path: Path
) -> None:
    """Paused as a call waits, rejected meanwhile: the run continues-as-new still paused."""
    payments = Payments(tmp_path / "p.db")
    agent = build_agent(payments, PAY_SCRIPT, approval=True)
    history = HistoryLimits(max_events=20, keep_recent_turns=50)  # full each turn; no summary
    async with running_worker(client, [agent], task_queue) as scripted:
        handle = await start_bounded(
            client, f"paused-{task_queue}", task_queue, history, task="pay ada"
        )
        await wait_for_state(client, handle.id, "awaiting_approval")
        first = (await handle.describe()).run_id
        paused = await cli(env, "pause", handle.id, "--reason", "incident 8")
        assert paused.returncode == 0 and "paused" in paused.stdout, paused.stderr
        await runs.reject(client, handle.id, STEP, reviewer="ada", reason="not now")
        held = await wait_for_state(client, handle.id, "paused")
        for _ in range(300):  # the segment asks the server its size (a step) before it hands over
            if (await handle.describe()).run_id != first:
                break
            await asyncio.sleep(0.1)
        assert (await handle.describe()).run_id != first, "it continued as new while paused"
        held = await wait_for_state(client, handle.id, "paused")
        assert "incident 8" in held.detail and len(scripted.requests) == 2
        status = await cli(env, "status", handle.id)
        assert "paused by operator: incident 8" in status.stdout, status.stdout
        unpaused = await cli(env, "unpause", handle.id)
        assert unpaused.returncode == 0 and "unpaused" in unpaused.stdout, unpaused.stderr
        result = await handle.result()
    assert result.state == "done" and payments.count() == 0 and len(scripted.requests) == 3


@pytest.mark.parametrize("park", ["model_unavailable", "limit_reached"])
async def test_a_pause_over_a_park_keeps_the_park_shown_and_movable(
    client: Client, task_queue: str, tmp_path: Path, api: FakeMessagesAPI, claude: Claude, park: str
) -> None:
    """Pause and unpause a parked run: it shows its park throughout (not `running`), and the
    verb that moves the park still moves it; the payment is made once."""
    api.enqueue_message(tool_use("pay", {"payee": "ada", "amount": 5}))
    if park == "model_unavailable":
        api.enqueue_error(401, message="invalid x-api-key")
    api.enqueue_message(text("Paid ada 5."))
    start: dict[str, Any] = {"limits": Limits(max_turns=1)} if park == "limit_reached" else {}
    opened = open_payer(
        client, task_queue, tmp_path / "p.db", script=[], until=park,
        worker={"claude": claude(api)}, **start,
    )  # fmt: skip
    async with opened as run:
        handle, parked = run.handle, run.status
        assert parked is not None
        await runs.pause(client, handle.id, reviewer="ops", reason="incident 9")
        shown = await runs.status(client, handle.id)
        assert (shown.state, shown.detail) == (park, parked.detail), shown
        await runs.unpause(client, handle.id, reviewer="ops")
        shown = await runs.status(client, handle.id)
        assert (shown.state, shown.detail) == (park, parked.detail), shown  # not `running`
        moved = await runs.resume(client, handle.id, reviewer="ops", max_turns=5)
        assert moved.decision in ("resumed", "limits raised"), moved
        await handle.result()
        assert run.payments.count() == 1
