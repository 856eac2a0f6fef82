"""What Claude's server tools cost is recorded, priced and reserved (issue 30.4).

A `web_search` is billed per search ($10 per thousand at list price) on top of tokens: the
usage Waypoint recorded had no searches, so a run's cost and its budget left them out.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from temporalio.client import Client

from tests.agents import Payments, build_agent
from tests.conftest import Claude, running_worker
from tests.fake_messages_api import FakeMessagesAPI, text
from tests.support.budgets import refused_at_start
from waypoint import Agent
from waypoint._providers.pricing import Price, cost_usd
from waypoint._workflows import budget
from waypoint.client.runs import start_run
from waypoint.protocol import (
    AgentSpec,
    AgentState,
    CallPrice,
    Limits,
    PriceTier,
    RunInput,
    Usage,
)
from waypoint.protocol.billing import BILLED_USES, SERVER_USES
from waypoint.server_tools import web_search


def test_every_server_tool_count_the_api_reports_is_in_the_one_table() -> None:
    """A billed server tool is a row of `SERVER_USES` with its fields: the rest reads the row."""
    from anthropic.types import ServerToolUsage

    assert {u.usage for u in SERVER_USES} == set(ServerToolUsage.model_fields)
    assert {u.usage for u in SERVER_USES} <= set(Usage.model_fields)
    for u in BILLED_USES:
        assert u.per_use in CallPrice.model_fields and u.override in Price.model_fields


@pytest.fixture
def api() -> Iterator[FakeMessagesAPI]:
    with FakeMessagesAPI() as api:
        yield api


def researcher(tmp_path: Path, **search: int) -> Agent:
    plain = build_agent(Payments(tmp_path / "p.db"), script=[])
    return Agent(
        name="researcher",
        model=plain.model,
        system="Research.",
        server_tools=[web_search(**search)],
    )


async def test_a_calls_searches_are_on_its_ledger_line_and_in_its_cost(
    client: Client, task_queue: str, tmp_path: Path, api: FakeMessagesAPI, claude: Claude
) -> None:
    agent = researcher(tmp_path, max_uses=3)
    usage = {"input_tokens": 1000, "output_tokens": 100}
    searched = usage | {"server_tool_use": {"web_search_requests": 2, "web_fetch_requests": 0}}
    api.enqueue_message(text("Found it."), usage=searched)
    async with running_worker(client, [agent], task_queue, claude=claude(api)):
        handle = await start_run(client, "researcher", "look", task_queue=task_queue)
        result = await handle.result()
    (model,) = [r for r in result.ledger if r.kind == "model"]
    tokens_only = cost_usd(agent.model, Usage(input_tokens=1000, output_tokens=100))
    assert tokens_only is not None
    assert model.cost_usd == pytest.approx(tokens_only + 2 * 0.01)
    assert result.cost_usd == pytest.approx(tokens_only + 2 * 0.01)


def test_a_calls_reservation_holds_its_max_uses_searches() -> None:
    price = CallPrice(tiers=[PriceTier(input=3.0, output=15.0)], per_search=0.01)
    tokens = budget.worst_cost(price, 1000, 1000)  # $0.018
    base = AgentSpec(name="r", model="m", provider="anthropic", system="s", tools=[], price=price)
    for uses, fits in ((2, True), (5, False)):
        spec = base.model_copy(update={"server_tools": [web_search(max_uses=uses)]})
        s = AgentState(
            input=RunInput(agent="r", task="t"),
            spec=spec,
            limits=Limits(max_cost_usd=tokens + 0.04),
        )
        why = budget.refusal(s, spec, "t1.model", 1000, 1000)
        assert (why == "") is fits, why
        if not fits:
            assert f"may cost ${tokens + 0.05:.4f}" in why


async def test_a_cost_budget_with_an_uncapped_web_search_is_refused_at_start(
    client: Client, task_queue: str, tmp_path: Path, api: FakeMessagesAPI, claude: Claude
) -> None:
    why = await refused_at_start(client, task_queue, researcher(tmp_path), api, claude(api), 1.0)
    assert "web_search has no max_uses" in why
