"""Every verb can be signed: an agent with `signed_decisions=True` refuses each one unsigned.

Steer, correct, answer, resume and raise_limits reach the run and are checked on its worker
(an Update's sender hears the refusal; a signal's is recorded under `ignored_signals`); cancel
is refused by the client before Temporal's cancel goes, and its signature travels in the
cancel's reason; a fork checks its own signature before it loads anything. Approve, reject,
resolve, set_policy, pause and unpause are `tests/test_decisions.py`'s and
`tests/test_decision_events.py`'s. Real dev server, real workers.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle

from tests.agents import PAY_SCRIPT, Payments, build_agent
from tests.client_tool_app import asker
from tests.conftest import wait_for_state
from tests.test_decision_events import Reviewer
from tests.test_decisions import until_ignored
from waypoint._security.signing import sign
from waypoint.client import runs, verbs
from waypoint.errors import DecisionRefusedError
from waypoint.protocol import Correction, Limits, ResumeRequest
from waypoint.protocol.signatures import fields, message
from waypoint.protocol.verbs import Cancel, LimitsChange

GRACE = "grace"


@asynccontextmanager
async def waiting_payer(
    client: Client, task_queue: str, tmp_path: Path
) -> AsyncIterator[tuple[Reviewer, WorkflowHandle[Any, Any]]]:
    """A signed_decisions payer's run, waiting for approval, and grace who holds the key."""
    grace = Reviewer(signed=True)
    agent = build_agent(Payments(tmp_path / "p.db"), PAY_SCRIPT, approval=True)
    async with grace.worker(client, agent, task_queue):
        handle = await runs.start_run(client, "payer", "pay ada", task_queue=task_queue)
        await wait_for_state(client, handle.id, "awaiting_approval")
        yield grace, handle


async def test_steer_correct_resume_and_raise_limits_are_refused_unsigned_and_taken_signed(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    async with waiting_payer(client, task_queue, tmp_path) as (grace, handle):
        run = handle.id
        with pytest.raises(DecisionRefusedError, match="unsigned steer"):
            await runs.steer(client, run, "check twice", reviewer="grace")
        note = Correction(note="ada's account moved", reviewer="grace")
        with pytest.raises(DecisionRefusedError, match="unsigned correct"):
            await runs.correct(client, run, note)
        raised = LimitsChange(max_turns=30, reviewer="grace", decision_id="l1")
        await handle.signal("raise_limits", raised)
        await handle.signal("resume", ResumeRequest(reviewer="grace", decision_id="r1"))
        status = await until_ignored(client, run, 4)
        refused = {i.signal: i.reason for i in status.ignored_signals}
        assert set(refused) == {"steer", "correct", "raise_limits", "resume"}, refused
        assert all(r.startswith("unsigned ") for r in refused.values()), refused
        assert (await handle.query("limits", result_type=Limits)).max_turns == 20

        key = grace.key
        steered = await runs.steer(client, run, "check twice", reviewer="grace", signing_key=key)
        assert steered.recorded and steered.decision == "steered", steered
        noted = await runs.correct(client, run, note, signing_key=grace.key)
        assert noted.recorded and noted.decision == "corrected", noted
        await runs.raise_limits(client, run, reviewer="grace", max_turns=30, signing_key=grace.key)
        chain = await verbs.chain_id(client, run)
        woke = sign(grace.key, run, chain, "resume", ResumeRequest(reviewer="grace"))  # type: ignore[arg-type]
        await handle.signal("resume", woke)  # nothing parked: refused for that, not unsigned
        status = await until_ignored(client, run, 5)
        assert (await handle.query("limits", result_type=Limits)).max_turns == 30
        late = status.ignored_signals[4]
        assert late.signal == "resume" and not late.reason.startswith("unsigned"), late
        lines = {r.tool for r in await runs.ledger(client, run) if r.kind == "operator"}
        assert "steer" in lines, lines
        await handle.cancel()


async def test_an_answer_is_refused_unsigned_and_taken_signed(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    grace = Reviewer(signed=True)
    async with grace.worker(client, asker(tmp_path / "notes.db"), task_queue):
        handle = await runs.start_run(client, "asker", "pick", task_queue=task_queue)
        status = await wait_for_state(client, handle.id, "awaiting_answer")
        (question,) = status.pending_questions
        step, red = question.step_id, {"choice": "red"}
        with pytest.raises(DecisionRefusedError, match="unsigned answer"):
            await runs.answer(client, handle.id, step, red, reviewer=GRACE)
        sent = await runs.answer(
            client, handle.id, step, red, reviewer=GRACE,
            signing_key=grace.key,
        )  # fmt: skip
        assert sent.recorded and sent.decision == "answered", sent
        await handle.result()


async def test_cancel_and_fork_are_refused_unsigned_and_carry_the_signature_signed(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    async with waiting_payer(client, task_queue, tmp_path) as (grace, handle):
        run = handle.id
        unsigned = await runs.fork(client, run, 1, task_queue=task_queue, reviewer="grace")
        with pytest.raises(WorkflowFailureError) as failed:
            await asyncio.wait_for(unsigned.result(), 30)
        assert "unsigned fork" in str(failed.value.cause), failed.value.cause
        forked = await runs.fork(
            client, run, 1, task_queue=task_queue, reviewer="grace", signing_key=grace.key
        )
        await wait_for_state(client, forked.id, "awaiting_approval")
        line = next(r for r in await runs.ledger(client, forked.id) if ".fork." in r.step_id)
        assert "by grace (signed)" in line.summary, line
        await forked.cancel()

        with pytest.raises(DecisionRefusedError, match="unsigned cancel"):
            await runs.cancel(client, run, reviewer="grace", reason="done")
        await runs.cancel(client, run, reviewer="grace", reason="done", signing_key=grace.key)
        with pytest.raises(WorkflowFailureError):
            await handle.result()
    reason = ""
    async for event in handle.fetch_history_events():
        if event.HasField("workflow_execution_cancel_requested_event_attributes"):
            reason = event.workflow_execution_cancel_requested_event_attributes.cause
    said, _, signature = reason.partition(" [signed at ")
    signed_at, _, value = signature.removesuffix("]").partition(": ")
    assert said == "cancelled by grace: done", reason
    chain = await verbs.chain_id(client, run)
    asked = fields(Cancel(reviewer="grace", reason="done"))
    assert grace.key is not None
    grace.key.public_key().verify(
        base64.b64decode(value), message(run, chain, "cancel", asked, signed_at)
    )


async def test_an_unsigned_pause_sent_before_the_spec_loads_is_refused(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """Before its spec, a run cannot know it takes signed decisions only: a pause that came
    then (no worker up) waits for the spec, and is refused unsigned."""
    from tests.test_decision_events import Reviewer
    from waypoint.protocol.verbs import Hold

    grace = Reviewer(signed=True)
    agent = build_agent(Payments(tmp_path / "p.db"), PAY_SCRIPT, approval=True)
    handle = await runs.start_run(
        client, "payer", "pay ada 5", task_queue=task_queue, queue_anyway=True
    )
    await handle.signal("pause", Hold(reviewer="mallory", reason="unsigned", decision_id="p1"))
    async with grace.worker(client, agent, task_queue):
        await wait_for_state(client, handle.id, "awaiting_approval")  # not held: it went on
        status = await until_ignored(client, handle.id, 1)
    assert [i.signal for i in status.ignored_signals] == ["pause"], status.ignored_signals
    assert "sign" in status.ignored_signals[0].reason, status.ignored_signals
    assert status.state == "awaiting_approval"


async def test_a_signed_raise_limits_then_an_unsigned_one_before_the_spec_are_judged_each(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """Both came with no worker up: the signed one is put in force, the unsigned one refused
    with its own line; neither replaces the other."""
    grace = Reviewer(signed=True)
    agent = build_agent(Payments(tmp_path / "p.db"), PAY_SCRIPT, approval=True)
    handle = await runs.start_run(
        client, "payer", "pay ada 5", task_queue=task_queue, queue_anyway=True
    )
    chain = await verbs.chain_id(client, handle.id)
    raised = LimitsChange(max_turns=30, reviewer=GRACE, decision_id="l1")
    assert grace.key is not None
    await handle.signal("raise_limits", sign(grace.key, handle.id, chain, "raise_limits", raised))
    forged = LimitsChange(max_turns=90, reviewer=GRACE, decision_id="l2")
    await handle.signal("raise_limits", forged)
    async with grace.worker(client, agent, task_queue):
        await wait_for_state(client, handle.id, "awaiting_approval")
        status = await until_ignored(client, handle.id, 1)
        limits = await handle.query("limits", result_type=Limits)
        ledger = await runs.ledger(client, handle.id)
    (refused,) = status.ignored_signals
    assert refused.signal == "raise_limits" and refused.reason.startswith("unsigned"), refused
    assert limits.max_turns == 30, limits
    (line,) = [r for r in ledger if ".limits." in r.step_id]
    assert "max_turns 20 -> 30" in line.summary, line
