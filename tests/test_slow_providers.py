"""A model provider slower than the model heartbeat timeout is waited for, never retried."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path

from temporalio.client import Client

from tests.agents import Payments, build_agent
from tests.conftest import running_worker
from waypoint._providers.scripted import ScriptedModel
from waypoint.client.runs import start_run
from waypoint.protocol import StepOptions
from waypoint.testing import reply, text


async def test_a_slow_scripted_model_heartbeats_and_answers_once(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    agent = build_agent(Payments(tmp_path / "payments.db"), [reply(text("Done, slowly."))])
    slow = ScriptedModel({agent.name: agent.script or []}, latency=4.0, chunks=1)
    options = StepOptions(
        model_heartbeat_timeout=timedelta(seconds=2),
        retry_initial_interval=timedelta(milliseconds=100),
    )
    async with running_worker(client, [agent], task_queue, scripted=slow):
        handle = await start_run(client, "payer", "go", task_queue=task_queue, options=options)
        result = await asyncio.wait_for(handle.result(), 60)  # retried for ever before
    assert result.output == "Done, slowly."
    (model,) = [r for r in result.ledger if r.kind == "model"]
    assert model.attempt == 1  # a provider that says nothing for 4 s was not timed out
