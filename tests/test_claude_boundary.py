"""The Claude boundary end to end: the real `anthropic` client, the local Messages API server
that holds it to the API's rules, Waypoint's worker and the real dev server."""

from __future__ import annotations

import asyncio
from pathlib import Path

from temporalio.client import Client

from tests.agents import Payments, build_agent
from tests.conftest import Claude, running_worker
from tests.fake_messages_api import FakeMessagesAPI, text, tool_use, tool_use_partial
from waypoint.client.runs import start_run
from waypoint.protocol import ModelSettings, RunResult


async def run(
    client: Client,
    task_queue: str,
    api: FakeMessagesAPI,
    agent,  # type: ignore[no-untyped-def]
    claude: Claude,
) -> RunResult:
    async with running_worker(client, [agent], task_queue, claude=claude(api)):
        handle = await start_run(client, "payer", "go", task_queue=task_queue)
        return await asyncio.wait_for(handle.result(), 60)


async def test_a_pay_call_cut_off_mid_json_is_never_executed(
    client: Client, task_queue: str, tmp_path: Path, claude: Claude
) -> None:
    """`{"payee":"ada","amount": 12` where 1200 was meant: the SDK would parse 12."""
    payments = Payments(tmp_path / "p.db")
    agent = build_agent(payments, script=[])
    with FakeMessagesAPI() as api:
        api.enqueue_message(
            text("Paying."),
            tool_use_partial("pay", '{"payee": "ada", "amount": 12'),
            stop_reason="max_tokens",
        )
        api.enqueue_message(tool_use("pay", {"payee": "ada", "amount": 1200}))
        api.enqueue_message(text("Paid ada 1200."))
        result = await run(client, task_queue, api, agent, claude)
        first, again, _ = api.message_requests
    assert payments.count() == 1 and payments.faults.executions == 1
    assert [r["amount"] for r in [payments.find(result.ledger[3].effect_key or "")]] == [1200]  # type: ignore[index]
    assert first.body["max_tokens"] < again.body["max_tokens"] == 64_000  # the model's full budget
    assert [(r.step_id, r.stop_reason) for r in result.ledger if r.kind == "model"][:2] == [
        ("t1.model", "max_tokens"),
        ("t1.model.full", "tool_use"),
    ]


async def test_prompt_caching_is_on_by_default_and_priced(
    client: Client, task_queue: str, tmp_path: Path, claude: Claude
) -> None:
    agent = build_agent(Payments(tmp_path / "p.db"), script=[])
    agent.system = "You pay people. " * 400  # over the 1,024-token minimum for a cache entry
    with FakeMessagesAPI(count_tokens=True) as api:
        for i in range(3):
            api.enqueue_message(text(f"step {i}"), tool_use("add", {"a": i, "b": 1}))
        api.enqueue_message(text("done"))
        cached = await run(client, task_queue, api, agent, claude)
        usages = list(api.usages)
    assert usages[0]["cache_creation_input_tokens"] > 1024
    assert all(u["cache_read_input_tokens"] > 1024 for u in usages[1:])
    agent.settings = ModelSettings(cache="off")
    with FakeMessagesAPI(count_tokens=True) as api:
        for i in range(3):
            api.enqueue_message(text(f"step {i}"), tool_use("add", {"a": i, "b": 1}))
        api.enqueue_message(text("done"))
        uncached = await run(client, task_queue + "-off", api, agent, claude)
        assert not any(u["cache_read_input_tokens"] for u in api.usages)
    assert cached.cost_usd < 0.6 * uncached.cost_usd


async def test_tool_choice_and_one_call_per_reply_reach_the_api(
    client: Client, task_queue: str, tmp_path: Path, claude: Claude
) -> None:
    agent = build_agent(Payments(tmp_path / "p.db"), script=[])
    agent.settings = ModelSettings(tool_choice="any", parallel_tool_calls=False, effort="low")
    with FakeMessagesAPI() as api:
        api.enqueue_message(tool_use("add", {"a": 1, "b": 2}))
        api.enqueue_message(text("3"))
        await run(client, task_queue, api, agent, claude)
        body = api.message_requests[0].body
    assert body["tool_choice"] == {"type": "any", "disable_parallel_tool_use": True}
    assert body["output_config"] == {"effort": "low"}
