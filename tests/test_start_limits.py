"""A limit set at a run's start takes that limit's place; every limit left unset stays the agent's.

The real dev server, the real `anthropic` client against the local Messages API server (which
bills each request as the API does), and the three ways a person starts a run: the client, the
CLI (a subprocess) and the console's `POST /api/runs`. The limits a run is under are read
from the run (its `limits` query and ledger), not from what was sent.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from temporalio.client import Client

from tests.cli import ROOT, waypoint
from tests.conftest import Claude, running_worker, wait_for_state
from tests.fake_messages_api import FakeMessagesAPI
from tests.test_budgets import reader, reads_forever
from tests.test_console import make_console
from tests.test_operator_truth import cli
from waypoint._console.app import build_app
from waypoint.client import runs
from waypoint.protocol import (
    AgentSpec,
    AgentState,
    HistoryLimits,
    HistoryOverride,
    Limits,
    LimitsOverride,
    RunInput,
)

AGENTS = Limits(max_turns=10, max_tokens_per_call=500, max_cost_usd=0.05, max_total_tokens=90_000)
"""The agent's own: a cost cap its second model step (reading a 12 KB page back) would cross."""
OPS = {"Authorization": "Bearer wpt_ops-token"}


@pytest.fixture
def api() -> Iterator[FakeMessagesAPI]:
    with FakeMessagesAPI(count_tokens=True) as api:
        api.auto_answer = reads_forever
        yield api


async def parked_under(client: Client, run: str) -> Limits:
    """Wait until `run` parks at a limit; the limits it is under, as the run says."""
    parked = await wait_for_state(client, run, "limit_reached")
    limits = await runs.handle(client, run).query("limits", result_type=Limits)
    await runs.handle(client, run).terminate(reason="test over")
    if limits.max_cost_usd is not None:  # the agent's cost cap, hit before the turns run out
        assert parked.detail.startswith("max_cost_usd=0.05 would be crossed: t2.model"), run
    return limits


async def test_max_turns_set_at_start_keeps_the_agents_cost_and_token_caps(
    client: Client,
    task_queue: str,
    tmp_path: Path,
    cli_env: dict[str, str],
    api: FakeMessagesAPI,
    claude: Claude,
) -> None:
    """Through the client, the CLI and the console alike: max turns 50, the rest the agent's;
    the run parks at the agent's cost cap, and its ledger says what the start set. A whole
    `Limits` still replaces the agent's, as it did before overrides."""
    console = make_console(client, tmp_path, task_queue)
    transport = httpx.ASGITransport(app=build_app(console))
    kept = AGENTS.model_copy(update={"max_turns": 50})
    async with (
        running_worker(client, [reader(limits=AGENTS)], task_queue, claude=claude(api)),
        httpx.AsyncClient(transport=transport, base_url="http://console") as http,
    ):
        by_client = await runs.start_run(
            client, "reader", "read", task_queue=task_queue, limits=LimitsOverride(max_turns=50)
        )
        assert await parked_under(client, by_client.id) == kept
        by_cli = f"cli-{task_queue}"
        started = await cli(cli_env, "start", "reader", "read", "--id", by_cli, "--max-turns", "50")
        assert started.returncode == 0, started.stderr
        assert await parked_under(client, by_cli) == kept
        by_console = f"console-{task_queue}"
        body = {"agent": "reader", "task": "read", "workflow_id": by_console, "max_turns": 50}
        answer = await http.post("/api/runs", json=body, headers=OPS)
        assert answer.status_code in (200, 201), answer.text
        assert await parked_under(client, by_console) == kept
        whole = await runs.start_run(
            client, "reader", "read", task_queue=task_queue, limits=Limits(max_turns=2)
        )
        assert await parked_under(client, whole.id) == Limits(max_turns=2)
        for run in (by_client.id, by_cli, by_console):
            (line,) = [r for r in await runs.ledger(client, run) if ".limits." in r.step_id]
            assert (line.step_id, line.kind) == ("t0.limits.1", "operator")
            assert line.summary == "limits set at start: max_turns 10 -> 50"
        assert not [r for r in await runs.ledger(client, whole.id) if ".limits." in r.step_id]


def test_a_history_budget_set_at_start_keeps_the_agents_other_parts() -> None:
    """`--history-events` alone: the agent's turns kept and byte budget stay; a whole one wins."""
    agents = HistoryLimits(max_events=5000, max_bytes=4_000_000, keep_recent_turns=5)
    spec = AgentSpec.model_construct(history=agents)
    events = RunInput(agent="a", task="t", history_override=HistoryOverride(max_events=400))
    budget = AgentState(input=events, spec=spec).history_budget()
    assert budget == agents.model_copy(update={"max_events": 400})
    whole = RunInput(agent="a", task="t", history=HistoryLimits(max_events=400))
    assert AgentState(input=whole, spec=spec).history_budget() == HistoryLimits(max_events=400)
    with pytest.raises(ValueError, match="greater than or equal to 1"):
        HistoryOverride(keep_recent_turns=0)


@pytest.mark.parametrize(
    "given",
    [{"max_turns": -3}, {"max_turns": 0}, {"max_total_tokens": 0}, {"max_cost_usd": 0.0},
     {"max_cost_usd": float("nan")}, {"max_cost_usd": float("inf")}, {"max_continue_as_new": 0}],
)  # fmt: skip
def test_a_limit_of_nothing_set_at_start_is_refused_not_recorded(given: dict[str, float]) -> None:
    """A cap of nothing (or a cost that is no number) is refused where it is made, with the
    field it names; the CLI's `--max-turns` says so before it connects."""
    (field,) = given
    with pytest.raises(ValueError, match=field):
        LimitsOverride(**given)  # type: ignore[arg-type]
    refused = waypoint(
        {**os.environ, "PYTHONPATH": str(ROOT)}, "start", "payer", "x", "--max-turns", "0"
    )
    assert refused.returncode == 2 and "--max-turns" in refused.stderr, refused.stderr
