"""Parks meeting the history budget and the operator's verbs: found by review, each failing
before its fix.

Real dev server, real worker, real SQLite downstream, the scripted model: a run parked at a
limit, between turns or before a model step whose worst case does not fit, hands over and goes
on once the limit is raised; a `resume` sent while a pause holds a changed-tool park is not
lost, in the park's own segment or after it was handed over.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from tests.agents import PAY_SCRIPT, build_agent, with_changed_pay
from tests.conftest import running_worker, wait_for_state
from tests.support.history import flood_until_handed_over
from tests.support.payer import open_payer
from tests.test_parked_handover import ASKED, FAST, FRESH, SMALL, STEP, parked_in, refused
from tests.test_waiting_handover import BUDGET
from waypoint.client import runs
from waypoint.protocol import LimitsOverride, ResumeRequest


@pytest.mark.parametrize(
    ("limit", "raise_to"),
    [
        # parked between turns (`Gates.within_limits`, an `OpenWait(kind="limit")`)
        ({"max_turns": 1}, {"max_turns": 5}),
        # parked before a model step whose worst case does not fit (`ModelSteps._reserve`,
        # `model_limit`): the common way a token or cost budget parks a run
        pytest.param(
            {"max_total_tokens": 100},
            {"max_total_tokens": 10**9},
        ),
    ],
    ids=["between_turns", "reserving_a_model_step"],
)
async def test_a_run_parked_at_a_limit_hands_over_at_its_history_budget(
    client: Client, task_queue: str, tmp_path: Path, limit: dict[str, Any], raise_to: Any
) -> None:
    opened = open_payer(
        client, task_queue, tmp_path / "p.db", until="limit_reached", worker=FRESH,
        limits=LimitsOverride(**limit), history=BUDGET, options=FAST,
    )  # fmt: skip
    async with opened as run:
        handle, payments = run.handle, run.payments
        first = await parked_in(handle)
        # 30 rounds of 8 refused decisions: 240 signals, twice the 120-event budget
        later = await flood_until_handed_over(handle, first, lambda _: refused(handle, 8), 30)
        again = await wait_for_state(client, handle.id, "limit_reached")
        assert later != first and again.detail == run.status.detail, again  # type: ignore[union-attr]
        await runs.resume(client, handle.id, reviewer="ops", **raise_to)
        result = await handle.result()
    assert result.state == "done" and payments.count() == 1, result


@pytest.mark.parametrize("handed", [False, True], ids=["same_segment", "handed_over"])
async def test_a_resume_of_a_changed_tool_park_paused_over_is_not_lost(
    client: Client, task_queue: str, tmp_path: Path, handed: bool
) -> None:
    """Paused while parked in tool_changed, then `resume` (rolled back) and `unpause`: it runs.

    In its own segment the park takes the resume, and the call waits for the unpause. Handed
    over, the next segment waits for the unpause before the reply's calls (`ToolSteps.reply`'s
    `before_step`), still shown `tool_changed`: the resume wakes nothing (counted as woke, not
    refused), and after the unpause the step parks again for a second resume.
    """
    db = tmp_path / "p.db"
    async with open_payer(client, task_queue, db, approval=True, until=ASKED, **SMALL) as run:
        handle, payments, original = run.handle, run.payments, run.agent
    pay_changed = [with_changed_pay(build_agent(payments, PAY_SCRIPT), payments, "refuse")]
    async with running_worker(client, pay_changed, task_queue, **FRESH):
        await runs.approve(client, handle.id, STEP, reviewer="me")
        await wait_for_state(client, handle.id, "tool_changed")
        await runs.pause(client, handle.id, reviewer="ops", reason="incident 11")
        if handed:
            first = await parked_in(handle)
            await flood_until_handed_over(handle, first, lambda _: refused(handle, 8), 60)
        shown = await wait_for_state(client, handle.id, "tool_changed")
    async with running_worker(client, [original], task_queue, **FRESH):  # rolled back
        await handle.signal("resume", ResumeRequest(reviewer="ops"))
        await runs.unpause(client, handle.id, reviewer="ops", reason="fixed")
        try:
            result = await asyncio.wait_for(handle.result(), 60)
        except TimeoutError:
            now = await runs.status(client, handle.id)
            raise AssertionError(f"shown {shown.state}; after resume+unpause: {now}") from None
    assert (result.state, payments.count()) == ("done", 1), result
