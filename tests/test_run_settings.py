"""What a run is started with reaches it from every door: `Agent`, `start_run`, `waypoint start`.

The history budget (when a run continues-as-new) is set per agent, per run, or on the command
line; a run started straight through Temporal still shows its agent in `status` and `list`.
"""

from __future__ import annotations

import os
from pathlib import Path

from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from tests.agents import Payments, build_agent, long_script
from tests.cli import ROOT, waypoint
from tests.conftest import SMALL_HISTORY, running_worker, start_continuing, wait_for_visibility
from waypoint.client import runs
from waypoint.protocol import HistoryLimits, HistoryOverride, Limits, RunInput
from waypoint.protocol import search_attributes as sa

TURNS = 10


async def test_an_agents_history_budget_applies_unless_the_run_brings_its_own(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    agent = build_agent(
        Payments(tmp_path / "p.db"), long_script(TURNS), limits=Limits(max_turns=50)
    )
    agent.history = SMALL_HISTORY
    continues = {}
    async with running_worker(client, [agent], task_queue):
        part = HistoryOverride(keep_recent_turns=3)  # set at start: the agent's events budget stays
        for name, budget in (("agent's", None), ("run's own", HistoryLimits()), ("part", part)):
            handle = await runs.start_run(
                client, "payer", "long", task_queue=task_queue, history=budget
            )
            result = await handle.result()
            assert result.output == f"done after {TURNS} turns"
            continues[name] = (await runs.status(client, handle.id)).continues
    assert continues["agent's"] >= 1  # the agent's small budget: it continued-as-new
    assert continues["run's own"] == 0  # the run's default budget won over the agent's
    assert continues["part"] >= 1  # one part set at start: the agent's small budget still holds


async def test_a_run_started_straight_through_temporal_shows_its_agent(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    agent = build_agent(Payments(tmp_path / "p.db"), long_script(4), limits=Limits(max_turns=50))
    async with running_worker(client, [agent], task_queue):
        handle = await start_continuing(client, f"raw-{task_queue}", task_queue)
        await handle.result()
    described = await handle.describe()
    assert described.typed_search_attributes.get(sa.AGENT) == "payer"
    await wait_for_visibility(client, f"WaypointAgent = 'payer' AND WorkflowId = '{handle.id}'", 1)


def cli_env(env: WorkflowEnvironment, task_queue: str) -> dict[str, str]:
    return {
        **os.environ,
        "TEMPORAL_ADDRESS": env.client.service_client.config.target_host,
        "WAYPOINT_TASK_QUEUE": task_queue,
        "PYTHONPATH": str(ROOT),
    }


async def test_waypoint_start_takes_a_history_budget_and_refuses_a_bad_one(
    client: Client, env: WorkflowEnvironment, task_queue: str
) -> None:
    shell = cli_env(env, task_queue)
    run = f"budget-{task_queue}"
    args = ["start", "payer", "x", "--check", "0", "--queue-anyway", "--id", run]
    started = waypoint(shell, *args, "--history-events", "80", "--keep-turns", "2")
    assert started.returncode == 0, started.stderr
    history = await client.get_workflow_handle(run).fetch_history()
    sent = history.events[0].workflow_execution_started_event_attributes.input.payloads
    (run_input,) = await client.data_converter.decode(sent, [RunInput])
    given = HistoryOverride(max_events=80, keep_recent_turns=2)  # the rest stays the agent's
    assert (run_input.history, run_input.history_override) == (None, given)
    bad = waypoint(shell, *args[:-1], f"{run}-bad", "--history-events", "0")
    assert bad.returncode == 2, bad.stderr
    assert "--history-events: Input should be greater than or equal to 1" in bad.stderr
    assert "Traceback" not in bad.stderr
    assert waypoint(shell, "cancel", run).returncode == 0
