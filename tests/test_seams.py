"""Where today's features meet: a correction resent after a lost answer, a correction sent
while a fork loads, an unsigned policy change sent before a signed agent's spec is loaded, the
decision ids a long run carries across continue-as-new."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from temporalio.client import Client

from tests.agents import PAY_SCRIPT, Payments, build_agent, long_script
from tests.conftest import running_worker, wait_for_state
from tests.support.history import start_bounded
from tests.support.payer import open_payer
from tests.test_carried_state import started_inputs, wait_for_pending
from tests.test_decisions import lossy, signed_agent
from waypoint._security.signing import load_public_keys, new_key
from waypoint._workflows.forks import LOADING
from waypoint.client import decisions, runs
from waypoint.client.runs import start_run
from waypoint.errors import DecisionRefusedError
from waypoint.protocol import (
    Correction,
    HistoryLimits,
    Limits,
    TextBlock,
)
from waypoint.protocol.policy import ApprovalPolicy, PolicyChange, Rule


def notes_seen(requests: list, step_id: str, note: str) -> int:
    """How many times the model request of `step_id` carries `note`."""
    (request,) = [r for r in requests if r.step_id == step_id]
    return sum(
        isinstance(b, TextBlock) and note in b.text for m in request.messages for b in m.content
    )


async def signal_applied_or_refused(client: Client, run: str, timeout: float = 20) -> None:
    """Wait until the resent `correct` signal is handled: a second operator step, or a refusal."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        state = await runs.state(client, run)
        if state.ignored_signals or sum(r.kind == "operator" for r in state.ledger) > 1:
            return
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"the correct signal was not handled: {state.ledger}")
        await asyncio.sleep(0.05)


async def test_a_note_whose_update_answer_was_lost_and_is_resent_as_a_signal_counts_once(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    note = Correction(note="pay by the 5th", reviewer="ops")
    db = tmp_path / "p.db"
    async with open_payer(client, task_queue, db, approval=True, until="awaiting_approval") as run:
        handle, model, payments = run.handle, run.model, run.payments
        sent = await decisions.correct(lossy(client), handle.id, note)
        assert not sent.recorded  # the update's answer was lost: the signal went after it
        await signal_applied_or_refused(client, handle.id)
        await runs.approve(client, handle.id, "t2.tool.1.pay", reviewer="grace")
        result = await handle.result()
        status = await runs.status(client, handle.id)
    assert payments.count() == 1
    assert notes_seen(model.requests, "t3.model", "pay by the 5th") == 1
    assert [r.step_id for r in result.ledger if r.kind == "operator"] == ["t2.operator.1"]
    (ignored,) = status.ignored_signals
    assert ignored.signal == "correct" and ignored.reason.startswith("duplicate: decision ")


async def test_a_note_sent_while_a_fork_loads_is_refused_not_accepted_and_lost(
    client: Client, tmp_path: Path
) -> None:
    payments = Payments(tmp_path / "p.db")
    agent = build_agent(payments, PAY_SCRIPT)
    source_queue, fork_queue = "tq-src-" + tmp_path.name[-8:], "tq-fork-" + tmp_path.name[-8:]
    async with running_worker(client, [agent], source_queue):
        source = await start_run(client, "payer", "pay ada 5", task_queue=source_queue)
        await source.result()
        forked = await runs.fork(client, source.id, 2, task_queue=fork_queue)
    # No worker answers for the source now: the fork's load_fork waits on its query.
    async with running_worker(client, [agent], fork_queue) as model:
        await wait_for_state(client, forked.id, "starting")
        with pytest.raises(DecisionRefusedError, match=LOADING):
            await runs.correct(client, forked.id, Correction(note="mind the fee", reviewer="ops"))
        async with running_worker(client, [agent], source_queue):
            result = await asyncio.wait_for(forked.result(), 120)
    assert payments.count() == 1
    assert result.output == "Paid ada 5."
    operator = [r.step_id for r in result.ledger if r.kind == "operator"]
    assert operator == ["t2.fork.1"]  # the fork's own line: no note was applied
    assert notes_seen(model.requests, "t3.model", "mind the fee") == 0


async def test_an_unsigned_policy_change_sent_before_a_signed_agents_spec_loads_is_refused(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    payments = Payments(tmp_path / "p.db")
    _, grace_public = new_key()
    keys = load_public_keys(f"grace:{grace_public}")
    handle = await start_run(client, "payer", "pay ada 5", task_queue=task_queue, queue_anyway=True)
    lax = PolicyChange(policy=ApprovalPolicy(default="allow"), reviewer="mallory")
    await handle.signal("set_policy", lax)  # before any worker: before the spec is loaded
    async with running_worker(client, [signed_agent(payments)], task_queue, decision_keys=keys):
        status = await wait_for_state(client, handle.id, "awaiting_approval")
        view = await decisions.show_policy(client, handle.id)
        await handle.terminate("test over")
    assert payments.count() == 0
    assert view.changes == 0
    assert [(i.signal, i.reason.split(":")[0]) for i in status.ignored_signals] == [
        ("set_policy", "unsigned set_policy")
    ]


async def test_a_long_run_with_a_decision_every_turn_carries_only_the_ids_of_steps_it_keeps(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    turns = 24
    agent = build_agent(
        Payments(tmp_path / "p.db"),
        long_script(turns + 1, pay_every=99),
        limits=Limits(max_turns=99),
    )
    agent.policy = ApprovalPolicy(rules=[Rule(tool="weather", action="ask")])
    budget = HistoryLimits(
        max_events=100_000, max_bytes=30_000, keep_recent_turns=2, keep_events=16
    )
    async with running_worker(client, [agent], task_queue):
        handle = await start_bounded(client, f"ids-{task_queue}", task_queue, budget)
        for turn in range(1, turns + 1):
            step = f"t{turn}.tool.1.weather"
            await wait_for_pending(client, handle.id, step, timeout=60)
            await runs.approve(client, handle.id, step, reviewer="me", decision_id=f"d{turn}")
        result = await handle.result()
    assert result.output == f"done after {turns + 1} turns"
    segments = await started_inputs(client, handle.id)
    carried = [given.resume for _, given in segments[1:] if given.resume is not None]
    assert len(carried) >= 2
    for state in carried:  # an id whose step went to the archive is no longer carried
        assert set(state.decision_ids.values()) <= {r.step_id for r in state.ledger}
    assert len(carried[-1].decision_ids) < turns // 2
