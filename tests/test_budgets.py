"""Budgets bind before spending: a model call reserves its worst case and parks if it does not fit.

The real `anthropic` client against the local Messages API server, which counts usage from each
request as the API bills it, on the real dev server. The server's request count proves a call
that did not fit was never made.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import BaseModel
from temporalio.client import Client

from tests.conftest import Claude, running_worker, start_directly, wait_for_state
from tests.fake_messages_api import FakeMessagesAPI, text, tool_use
from tests.test_subagents import wait_for_child
from waypoint._agent import Agent
from waypoint._tools import tool
from waypoint.client import runs
from waypoint.protocol import HistoryLimits, Limits, RunInput, RunStatus, StepRecord
from waypoint.testing import Script, reply
from waypoint.testing import tool_use as scripted_call

PAGE = "lorem ipsum " * 1000
"""A 12 KB page: reading one makes the next prompt dearer."""


class Page(BaseModel):
    page: int


class Topic(BaseModel):
    topic: str


def reader(
    name: str = "reader", limits: Limits | None = None, script: Script | None = None
) -> Agent:
    """An agent that reads pages of a report (a read tool with a large result)."""

    @tool("read")
    async def read(args: Page) -> str:
        """Read one page of the report."""
        return f"page {args.page}: {PAGE}"

    return Agent(
        name=name,
        model="claude-sonnet-4-6",
        system=f"You are {name}: you read the report.",
        tools=[read],
        limits=limits or Limits(max_tokens_per_call=500),
        script=script,
    )


def system_of(body: dict[str, Any]) -> str:
    system = body.get("system", "")
    return system if isinstance(system, str) else " ".join(b["text"] for b in system)


def reads_forever(body: dict[str, Any]) -> Any:
    """Answers every reader call with another page to read; summarises when asked to compact."""
    if "compact" in system_of(body):
        return [text("Summary: read some pages.")]
    return [tool_use("read", {"page": len(body["messages"]) // 2 + 1})]


@pytest.fixture
def api() -> Iterator[FakeMessagesAPI]:
    with FakeMessagesAPI(count_tokens=True) as api:
        yield api


def model_steps(*ledgers: list) -> int:
    """Model steps that completed: each is exactly one request the API answered."""
    return sum(1 for ledger in ledgers for r in ledger if r.kind == "model" and r.tokens)


def research_lead(child: Agent, limits: Limits, script: Script | None = None) -> Agent:
    """A lead that delegates research to `child`, within `limits` its children share."""
    return Agent(
        name="lead",
        model="claude-sonnet-4-6",
        system="You are the lead: you delegate research.",
        tools=[child.as_tool(input_type=Topic, description="Research a topic.")],
        limits=limits,
        script=script,
    )


async def researchers_parked(
    client: Client, task_queue: str
) -> tuple[RunStatus, list[RunStatus], list[list[StepRecord]]]:
    """Start the lead, wait until both its researchers park at the budget, then end it.

    Returns the lead's status, its researchers', and the three runs' ledgers.
    """
    handle = await runs.start_run(client, "lead", "research", task_queue=task_queue)
    children = [f"{handle.id}--t1.tool.{i}.researcher" for i in (1, 2)]
    for c in children:
        await wait_for_child(client, c, "limit_reached")
    parked = [await runs.status(client, c) for c in children]
    lead_status = await runs.status(client, handle.id)
    ledgers = [await runs.ledger(client, run) for run in [handle.id, *children]]
    await handle.terminate(reason="test over")
    return lead_status, parked, ledgers


async def test_cost_budget_parks_before_a_call_whose_worst_case_does_not_fit(
    client: Client, task_queue: str, api: FakeMessagesAPI, claude: Claude
) -> None:
    limits = Limits(max_cost_usd=0.05, max_tokens_per_call=500)
    api.enqueue_message(tool_use("read", {"page": 1}))
    api.enqueue_message(text("Read it."))
    async with running_worker(client, [reader(limits=limits)], task_queue, claude=claude(api)):
        handle = await runs.start_run(client, "reader", "read", task_queue=task_queue)
        parked = await wait_for_state(client, handle.id, "limit_reached")
        # t1.model fitted (~$0.01 at worst) and cost far less; t2.model reads the 12 KB page
        # back, which may cost more than the $0.05 budget holds: it is never sent.
        assert parked.detail.startswith("max_cost_usd=0.05 would be crossed: t2.model")
        assert len(api.message_requests) == 1 and 0 < parked.cost_usd < 0.05
        await handle.signal("raise_limits", limits.model_copy(update={"max_cost_usd": 1.0}))
        result = await handle.result()
    assert result.state == "done" and result.output == "Read it."
    assert len(api.message_requests) == 2 and 0.05 > result.cost_usd - parked.cost_usd > 0


async def test_sub_agents_sharing_a_parent_budget_never_spend_more_than_it_in_total(
    client: Client, task_queue: str, api: FakeMessagesAPI, claude: Claude
) -> None:
    child = reader("researcher")
    lead = research_lead(child, Limits(max_cost_usd=0.4, max_tokens_per_call=500))

    def answer(body: dict[str, Any]) -> Any:
        if "lead" not in system_of(body):
            return reads_forever(body)
        return [tool_use("researcher", {"topic": t}) for t in ("tides", "winds")]

    api.auto_answer = answer
    async with running_worker(client, [lead, child], task_queue, claude=claude(api)):
        lead_status, parked, ledgers = await researchers_parked(client, task_queue)
    spent = lead_status.cost_usd + sum(p.cost_usd for p in parked)
    assert spent <= 0.4  # each child kept inside its share; together inside the parent's budget
    assert sum(p.cost_usd for p in parked) > 0.1  # and they did use it
    assert all("would be crossed" in p.detail for p in parked)
    assert len(api.message_requests) == model_steps(*ledgers)  # no call made while parked


async def test_sub_agents_sharing_a_parent_token_budget_never_use_more_than_it_in_total(
    client: Client, task_queue: str
) -> None:
    pages: Script = [reply(scripted_call("read", page=n)) for n in range(1, 30)]
    child = reader("researcher", script=pages)
    lead_script: Script = [
        reply(*(scripted_call("researcher", topic=t) for t in ("tides", "winds"))),
        reply(scripted_call("researcher", topic="never")),
    ]
    limits = Limits(max_total_tokens=60_000, max_tokens_per_call=500)
    lead = research_lead(child, limits, lead_script)
    async with running_worker(client, [lead, child], task_queue) as model:
        lead_status, parked, ledgers = await researchers_parked(client, task_queue)
    used = lead_status.total_tokens + sum(p.total_tokens for p in parked)
    assert used <= 60_000 and sum(p.total_tokens for p in parked) > 20_000
    assert all("max_total_tokens" in p.detail and "would be crossed" in p.detail for p in parked)
    assert len(model.calls) == model_steps(*ledgers)  # no call made while parked


async def test_a_budget_binds_before_spending_across_continue_as_new(
    client: Client, task_queue: str, api: FakeMessagesAPI, claude: Claude
) -> None:
    finish = asyncio.Event()

    def answer(body: dict[str, Any]) -> Any:
        if finish.is_set() and "compact" not in system_of(body):
            return [text("Enough reading.")]
        return reads_forever(body)

    api.auto_answer = answer
    limits = Limits(max_turns=100, max_cost_usd=0.2, max_tokens_per_call=500)
    async with running_worker(client, [reader(limits=limits)], task_queue, claude=claude(api)):
        run = RunInput(
            agent="reader", task="read", history=HistoryLimits(max_events=50, keep_recent_turns=1)
        )
        handle = await start_directly(client, f"budget-can-{task_queue}", task_queue, run)
        parked: RunStatus = await wait_for_state(client, handle.id, "limit_reached", timeout=90)
        assert parked.continues >= 1  # spent in earlier segments still counts
        assert parked.detail.startswith("max_cost_usd=0.2 would be crossed")
        assert 0.1 < parked.cost_usd <= 0.2
        assert len(api.message_requests) == model_steps(await runs.ledger(client, handle.id))
        finish.set()
        await handle.signal("raise_limits", limits.model_copy(update={"max_cost_usd": 1.0}))
        result = await handle.result()
    assert result.output == "Enough reading." and result.cost_usd > parked.cost_usd


async def test_a_cost_budget_sent_with_the_start_for_an_unpriced_model_is_refused_not_fatal(
    client: Client, task_queue: str, api: FakeMessagesAPI, claude: Claude
) -> None:
    agent = reader()
    agent.model = "claude-unpriced-9"
    api.enqueue_message(text("Nothing to read."))
    async with running_worker(client, [agent], task_queue, claude=claude(api)):
        handle = await start_directly(
            client,
            f"early-limits-{task_queue}",
            task_queue,
            RunInput(agent="reader", task="read"),
            start_signal="raise_limits",
            start_signal_args=[Limits(max_cost_usd=1.0)],
        )
        result = await handle.result()
        status = await runs.status(client, handle.id)
        limits = await handle.query("limits", result_type=Limits)
    assert result.state == "done" and result.output == "Nothing to read."
    (ignored,) = status.ignored_signals
    assert ignored.signal == "raise_limits" and "no price is known" in ignored.reason
    assert limits == Limits(max_tokens_per_call=500)  # the agent's own limits stay in force
