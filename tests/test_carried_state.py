"""What a long run carries across continue-as-new stays bounded; nothing it did is lost."""

from __future__ import annotations

import json
import os
from pathlib import Path

from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from tests.agents import Payments, build_agent, long_script
from tests.cli import ROOT, waypoint
from tests.conftest import running_worker
from waypoint import runs
from waypoint.models import HistoryBudget, Limits, RunInput, RunResult, RunStatus


async def started_inputs(client: Client, run: str) -> list[tuple[int, RunInput]]:
    """Each history segment's first event size and input, oldest first."""
    found: list[tuple[int, RunInput]] = []
    run_id = (await client.get_workflow_handle(run).describe()).run_id
    while run_id:
        events = client.get_workflow_handle(run, run_id=run_id).fetch_history_events(page_size=1)
        first = await anext(aiter(events))
        started = first.workflow_execution_started_event_attributes
        (given,) = await client.data_converter.decode_wrapper(started.input, [RunInput])
        found.insert(0, (first.ByteSize(), given))
        run_id = started.continued_execution_run_id
    return found


async def test_long_run_carries_bounded_state_and_continues_only_when_history_fills(
    env: WorkflowEnvironment, client: Client, task_queue: str, tmp_path: Path
) -> None:
    turns, paid_turns = 60, list(range(5, 60, 5))
    payments = Payments(tmp_path / "p.db")
    agent = build_agent(payments, long_script(turns, pay_every=5), limits=Limits(max_turns=99))
    budget = HistoryBudget(
        max_events=100_000, max_bytes=40_000, keep_recent_turns=2, keep_events=16
    )
    async with running_worker(client, [agent], task_queue):
        handle = await client.start_workflow(
            "AgentWorkflow",
            RunInput(agent="payer", task="long", history=budget),
            id=f"carry-{task_queue}",
            task_queue=task_queue,
            result_type=RunResult,
        )
        result = await handle.result()
        status = await client.get_workflow_handle(handle.id).query("status", result_type=RunStatus)
    assert result.output == f"done after {turns} turns"

    segments = await started_inputs(client, handle.id)
    carried = [given.resume for _, given in segments[1:] if given.resume is not None]
    began = [s.turn for s in carried]
    sizes = [size for size, _ in segments[1:]]
    # Effect steps are always carried (about 450 bytes each): the rest must not grow.
    rest = [
        size - sum(len(r.model_dump_json()) for r in s.ledger if r.effect_key)
        for size, s in zip(sizes, carried, strict=True)
    ]
    print(f"{len(segments)} segments from turns {began}, input bytes {sizes}, less effects {rest}")
    # The run hands over when its history fills, not every turn, to the end of the run ...
    assert status.continues == len(segments) - 1 >= 3
    assert all(later - earlier >= 4 for earlier, later in zip(began, began[1:], strict=False))
    # ... because what it hands over stays small: no larger late in the run than early on.
    assert max(sizes) < 20_000
    assert max(rest[1:]) - min(rest[1:]) < 1_000
    assert max(len([r for r in s.ledger if not r.effect_key]) for s in carried) < 25

    # Effects happened once each, and their records are all carried to the end.
    effects = [r for r in result.ledger if r.effect_key]
    assert [r.step_id for r in effects] == [f"t{t}.tool.2.pay" for t in paid_turns]
    assert all(r.status == "completed" and payments.count(r.effect_key) == 1 for r in effects)
    assert payments.count() == len(paid_turns)

    # Earlier steps were archived, counted, and read back whole from the closed runs' inputs.
    assert result.steps_archived == status.steps_archived > 0
    assert len(result.ledger) < 60
    whole, note = await runs.whole_ledger(client, handle.id, result.ledger)
    assert note == ""
    expected = {f"t{t}.model" for t in range(1, turns + 1)}
    expected |= {f"t{t}.tool.1.weather" for t in range(1, turns)}
    expected |= {f"t{t}.tool.2.pay" for t in paid_turns}
    ids = [r.step_id for r in whole]
    assert expected <= set(ids) and len(ids) == len(set(ids))
    assert len(whole) == len(result.ledger) + result.steps_archived
    assert sum(r.tokens for r in whole) == result.total_tokens == status.total_tokens
    assert abs(sum(r.cost_usd or 0.0 for r in whole) - result.cost_usd) < 1e-9
    models = [int(i.split(".")[0][1:]) for i in ids if i.endswith(".model")]
    assert models == sorted(models)  # in the order they ran

    # The CLI shows the same whole ledger, with no worker up.
    cli_env = {
        **os.environ,
        "TEMPORAL_ADDRESS": env.client.service_client.config.target_host,
        "TEMPORAL_NAMESPACE": "default",
        "PYTHONPATH": str(ROOT),
    }
    shown = waypoint(cli_env, "ledger", handle.id, "--json")
    assert shown.returncode == 0, shown.stderr
    assert [r["step_id"] for r in json.loads(shown.stdout)] == ids
