"""A cancel meeting a park that was handed over at the history budget, or its size check.

Real dev server, real worker, the scripted model. Each park is handed over twice (flooded with
refused decisions), then the run is cancelled: it must end cancelled, nothing paid, and the
parked step's ledger line must not be left open (parked, scheduled) in the final ledger.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from tests.agents import PAY_SCRIPT, build_agent, with_changed_pay
from tests.conftest import running_worker, wait_for_state
from tests.support.payer import open_payer
from tests.test_parked_handover import ASKED, FRESH, SMALL, STEP, parked_in, refused, twice
from waypoint._activities import history
from waypoint.client import runs
from waypoint.protocol import LimitsOverride

OPEN = ("scheduled", "running", "awaiting_approval", "needs_reconciliation")


async def test_a_cancel_of_a_model_step_parked_at_a_limit_after_a_handover(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    opened = open_payer(
        client, task_queue, tmp_path / "p.db", until="limit_reached", worker=FRESH,
        limits=LimitsOverride(max_total_tokens=100), **SMALL,
    )  # fmt: skip
    async with opened as run:
        handle, payments = run.handle, run.payments
        at = await parked_in(handle)
        await twice(handle)
        assert await parked_in(handle) != at
        await wait_for_state(client, handle.id, "limit_reached")
        await runs.cancel(client, handle.id, reviewer="ops", reason="probe")
        ended = await wait_for_state(client, handle.id, "cancelled")
        ledger = await runs.ledger(client, handle.id)
    assert payments.count() == 0, ended
    assert not [r for r in ledger if r.status in OPEN], ledger


async def test_a_cancel_of_a_changed_tool_park_after_a_handover(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    opened = open_payer(client, task_queue, tmp_path / "p.db", approval=True, until=ASKED, **SMALL)
    async with opened as run:
        handle, payments = run.handle, run.payments
    changed = with_changed_pay(build_agent(payments, PAY_SCRIPT), payments, "refuse")
    async with running_worker(client, [changed], task_queue, **FRESH):
        await runs.approve(client, handle.id, STEP, reviewer="me")
        await wait_for_state(client, handle.id, "tool_changed")
        await twice(handle)
        await wait_for_state(client, handle.id, "tool_changed")
        await runs.cancel(client, handle.id, reviewer="ops", reason="probe")
        ended = await wait_for_state(client, handle.id, "cancelled")
        ledger = await runs.ledger(client, handle.id)
    (line,) = [r for r in ledger if r.step_id == STEP]
    assert payments.count() == 0, ended
    assert line.status == "error" and "cancelled while parked" in (line.summary or ""), line
    assert not [r for r in ledger if r.status in OPEN], ledger


async def test_a_cancel_while_a_parked_run_asks_its_history_size_ends_the_run(
    client: Client, task_queue: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cancel reaches the run as its `waypoint.history_size` step runs (slowed here): the
    step's cancellation is an `ActivityError`, which `HistoryMeter._server` took for a server
    that cannot answer; the run went on parked, its cancel lost."""
    slow = history.heartbeating

    async def slowly(awaitable: Any, what: str) -> Any:
        try:
            await asyncio.sleep(4)
        except BaseException:  # cancelled meanwhile: the describe is never sent
            awaitable.close()
            raise
        return await slow(awaitable, what)

    monkeypatch.setattr(history, "heartbeating", slowly)
    opened = open_payer(
        client, task_queue, tmp_path / "p.db", until="limit_reached", worker=FRESH,
        limits=LimitsOverride(max_turns=1), **SMALL,
    )  # fmt: skip
    async with opened as run:
        handle = run.handle

        async def asking() -> bool:
            pending = (await handle.describe()).raw_description.pending_activities
            return any(a.activity_type.name == "waypoint.history_size" for a in pending)

        for _ in range(60):
            await refused(handle, 8)
            if await asking():
                break
        else:
            raise AssertionError("never asked its history size")
        await runs.cancel(client, handle.id, reviewer="ops", reason="probe")
        ended = await wait_for_state(client, handle.id, "cancelled")
    assert ended.state == "cancelled", ended
