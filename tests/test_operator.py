"""The escape hatch: inspect, correct, note, fork; every action recorded, no effect repeated."""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.client import Client

from tests.support.payer import open_payer
from waypoint.client import runs
from waypoint.errors import DecisionRefusedError, WaypointError
from waypoint.protocol import Correction, TextBlock, ToolResultBlock


async def test_correction_and_note_reach_the_next_model_step(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    db = tmp_path / "p.db"
    async with open_payer(client, task_queue, db, approval=True, until="awaiting_approval") as run:
        handle, model, payments = run.handle, run.model, run.payments
        with pytest.raises(DecisionRefusedError, match="no tool step t9.tool.1.x in this run"):
            await runs.correct(client, handle.id, Correction(step_id="t9.tool.1.x", result="?"))
        await runs.correct(
            client,
            handle.id,
            Correction(
                step_id="t1.tool.1.weather",
                result="rainy in Oslo",
                note="double-check the payee",
                reviewer="ops",
                reason="sensor was wrong",
            ),
        )
        state = await runs.state(client, handle.id)
        assert state.notes == ["Note from ops: double-check the payee"]
        await runs.approve(client, handle.id, "t2.tool.1.pay", reviewer="me")
        result = await handle.result()
    (t3,) = [r for r in model.requests if r.step_id == "t3.model"]
    blocks = [b for m in t3.messages for b in m.content]
    weather = [b for b in blocks if isinstance(b, ToolResultBlock) and "Oslo" in b.content]
    assert [b.content for b in weather] == ["rainy in Oslo"]
    assert any(isinstance(b, TextBlock) and "double-check the payee" in b.text for b in blocks)
    operator = [r for r in result.ledger if r.kind == "operator"]
    assert len(operator) == 1 and "ops (sensor was wrong)" in operator[0].summary
    assert payments.count() == 1


async def test_fork_reuses_recorded_steps_and_repeats_no_effect(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    async with open_payer(client, task_queue, tmp_path / "p.db", task="pay") as run:
        source, model, payments = run.handle, run.model, run.payments
        original = await source.result()
        assert payments.count() == 1
        with pytest.raises(WaypointError, match="fork after a finished turn"):
            await runs.fork(client, source.id, 3, task_queue=task_queue)
        forked = await runs.fork(
            client, source.id, 2, task_queue=task_queue, note="say it differently"
        )
        result = await forked.result()
    assert forked.id != source.id
    assert result.output == original.output
    assert payments.count() == 1  # the payment before the fork point was not made again
    pay = next(r for r in result.ledger if r.step_id == "t2.tool.1.pay")
    assert pay.effect_key is not None and pay.effect_key.startswith(f"{source.id}/")
    # Only the turn after the fork point called the model again.
    assert model.calls == ["t1.model", "t2.model", "t3.model", "t3.model"]
    (fork_t3,) = [r for r in model.requests[3:] if r.step_id == "t3.model"]
    assert "say it differently" in str(fork_t3.messages[-1].content)
