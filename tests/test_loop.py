"""The agent loop end to end on a real dev server with the scripted model."""

from __future__ import annotations

from pathlib import Path

from temporalio.client import Client

from tests.agents import PAY_SCRIPT, Payments, build_agent
from tests.conftest import running_worker
from waypoint.runs import start_run


async def test_run_completes_with_parallel_tools_and_one_payment(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    payments = Payments(tmp_path / "payments.db")
    agent = build_agent(payments, PAY_SCRIPT)
    async with running_worker(client, [agent], task_queue) as model:
        handle = await start_run(client, "payer", "pay ada 5", task_queue=task_queue)
        result = await handle.result()
    assert result.output == "Paid ada 5."
    assert result.turns == 3
    assert [r.step_id for r in result.ledger] == [
        "t0.spec",
        "t1.model",
        "t1.tool.1.weather",
        "t1.tool.2.add",
        "t2.model",
        "t2.tool.1.pay",
        "t3.model",
    ]
    assert all(r.status == "completed" for r in result.ledger)
    pay = result.ledger[5]
    assert pay.effect_key is not None
    assert pay.effect_key.startswith(f"{handle.id}/")
    assert pay.effect_key.endswith("/t2.tool.1.pay")
    assert payments.count(pay.effect_key) == 1
    assert model.calls == ["t1.model", "t2.model", "t3.model"]
