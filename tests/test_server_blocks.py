"""Claude's server tools: declared on an agent, their blocks kept byte for byte (issue 30.1, 30.2).

A reply that searched the web holds `server_tool_use` and `web_search_tool_result` blocks, and
text citing the results. Waypoint kept only text, thinking and tool calls: the next request
went without them (which the API rejects for a turn that used a server tool) and citations were
lost. Played through the real `anthropic` client against the local Messages API server, with
the worker replaced between the two model calls, so the second sends the transcript whole.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from tests.agents import Payments, build_agent
from tests.conftest import Claude, running_worker, the_pending_approval
from tests.fake_messages_api import FakeMessagesAPI, text, tool_use
from tests.support.replay import assert_replays
from waypoint import Agent
from waypoint.client import decisions, runs
from waypoint.client.runs import start_run
from waypoint.errors import ToolDefinitionError
from waypoint.protocol.events import TextDelta
from waypoint.server_tools import code_execution, tool_search, web_fetch, web_search

SEARCH: dict[str, Any] = {
    "type": "server_tool_use",
    "id": "srvtoolu_01",
    "name": "web_search",
    "input": {"query": "ada lovelace bank details"},
}
RESULTS: dict[str, Any] = {
    "type": "web_search_tool_result",
    "tool_use_id": "srvtoolu_01",
    "content": [
        {
            "type": "web_search_result",
            "url": "https://example.org/ada",
            "title": "Ada's page",
            "encrypted_content": "EqgfCioIARgBIiQ3YTAwMjY1Mi1mZjM5",
            "page_age": "April 30, 2025",
        }
    ],
}
CITED: dict[str, Any] = {
    "type": "text",
    "text": "Ada banks with the Analytical Bank.",
    "citations": [
        {
            "type": "web_search_result_location",
            "url": "https://example.org/ada",
            "title": "Ada's page",
            "encrypted_index": "Eo8BCioIAhgBIiQyYjQ0OWJmZi1lNm",
            "cited_text": "Ada keeps her account at the Analytical Bank.",
        }
    ],
}
FUTURE: dict[str, Any] = {"type": "orbital_tool_result", "tool_use_id": "srvtoolu_02", "x": [1]}
"""A block type no API version has yet: kept and sent back all the same."""


async def test_server_tool_blocks_and_citations_go_back_unchanged_after_a_new_worker(
    client: Client, task_queue: str, tmp_path: Path, api: FakeMessagesAPI, claude: Claude
) -> None:
    payments = Payments(tmp_path / "payments.db")
    agent = build_agent(payments, script=[], approval=True)
    pay = tool_use("pay", {"payee": "ada", "amount": 5})
    api.enqueue_message(SEARCH, RESULTS, CITED, FUTURE, pay)
    api.enqueue_message(text("Paid ada."))
    async with running_worker(client, [agent], task_queue, claude=claude(api)):
        handle = await start_run(client, "payer", "pay ada", task_queue=task_queue)
        pending = await the_pending_approval(client, handle.id)
    async with running_worker(  # a new worker: its transcript store holds nothing of the run
        client, [agent], task_queue, claude=claude(api)
    ):
        await decisions.approve(client, handle.id, pending.step_id, reviewer="grace")
        result = await handle.result()
    assert result.output == "Paid ada." and payments.count() == 1
    assert len(api.message_requests) == 2
    sent_back = api.message_requests[1].body["messages"][1]
    assert sent_back["role"] == "assistant"
    assert sent_back["content"] == [SEARCH, RESULTS, CITED, FUTURE, pay]
    await assert_replays(handle, client.data_converter)


async def test_an_agents_server_tools_go_with_every_call_after_its_own(
    client: Client, task_queue: str, tmp_path: Path, api: FakeMessagesAPI, claude: Claude
) -> None:
    payments = Payments(tmp_path / "payments.db")
    plain = build_agent(payments, script=[])
    where = {"type": "approximate", "city": "London", "country": "GB"}
    search = web_search(max_uses=3, allowed_domains=["example.org"], user_location=where)
    fetch, run_code = web_fetch(citations=True, max_content_tokens=5000), code_execution()
    agent = Agent(
        name="researcher",
        model=plain.model,
        system="Research, then answer.",
        tools=plain.tools,
        server_tools=[search, fetch, run_code, tool_search("bm25")],
    )
    api.enqueue_message(SEARCH, RESULTS, CITED)
    async with running_worker(client, [agent], task_queue, claude=claude(api)):
        handle = await start_run(client, "researcher", "who is ada", task_queue=task_queue)
        result = await handle.result()
    assert result.output == CITED["text"]
    tools = api.message_requests[0].body["tools"]
    assert tools[-1].pop("cache_control") == {"type": "ephemeral"}  # the prompt cache's breakpoint
    assert [t["name"] for t in tools[: len(plain.tools)]] == [t.name for t in plain.tools]
    assert tools[len(plain.tools) :] == [
        {
            "type": "web_search_20250305",
            "name": "web_search",
            "max_uses": 3,
            "allowed_domains": ["example.org"],
            "user_location": where,
        },
        {
            "type": "web_fetch_20250910",
            "name": "web_fetch",
            "citations": {"enabled": True},
            "max_content_tokens": 5000,
        },
        {"type": "code_execution_20250825", "name": "code_execution"},
        {"type": "tool_search_tool_bm25_20251119", "name": "tool_search_tool_bm25"},
    ]


def test_a_server_tool_is_refused_where_it_cannot_be_what_it_says(tmp_path: Path) -> None:
    with pytest.raises(ToolDefinitionError, match="allowed_domains or blocked_domains, not both"):
        web_search(allowed_domains=["a.org"], blocked_domains=["b.org"])
    plain = build_agent(Payments(tmp_path / "p.db"), script=[])
    clash = [t for t in plain.tools if t.name == "weather"]
    renamed = web_search().model_copy(update={"name": "weather"})
    with pytest.raises(ToolDefinitionError, match="clashes with Claude's server tool"):
        Agent(name="x", model=plain.model, system="s", tools=clash, server_tools=[renamed])


async def test_a_server_turn_paused_mid_search_continues_with_its_blocks(
    client: Client, task_queue: str, tmp_path: Path, api: FakeMessagesAPI, claude: Claude
) -> None:
    agent = Agent(
        name="searcher", model="claude-sonnet-4-6", system="Search.", server_tools=[web_search()]
    )
    api.enqueue_message(SEARCH, stop_reason="pause_turn")
    api.enqueue_message(RESULTS, CITED)
    async with running_worker(client, [agent], task_queue, claude=claude(api)):
        handle = await start_run(client, "searcher", "who is ada", task_queue=task_queue)
        result = await handle.result()
    assert result.output == CITED["text"]
    continued = api.message_requests[1].body["messages"]
    assert continued[-1]["content"][-1].pop("cache_control") == {"type": "ephemeral"}
    assert continued[-1] == {"role": "assistant", "content": [SEARCH]}  # the paused turn, whole
    steps = [r.step_id for r in result.ledger if r.kind == "model"]
    assert steps == ["t1.model", "t1.model.cont1"]


async def test_a_tool_code_execution_calls_passes_the_approval_and_keeps_its_caller(
    client: Client, task_queue: str, tmp_path: Path, api: FakeMessagesAPI, claude: Claude
) -> None:
    payments = Payments(tmp_path / "payments.db")
    agent = build_agent(payments, script=[], approval=True)
    run_code = {
        "type": "server_tool_use",
        "id": "srvtoolu_07",
        "name": "code_execution",
        "input": {"code": "pay('ada', 5)"},
    }
    caller = {"type": "code_execution_20250825", "tool_id": "srvtoolu_07"}
    pay = tool_use("pay", {"payee": "ada", "amount": 5}) | {"caller": caller}
    api.enqueue_message(run_code, pay)
    api.enqueue_message(text("Paid from code."))
    async with running_worker(client, [agent], task_queue, claude=claude(api)):
        handle = await start_run(client, "payer", "pay ada", task_queue=task_queue)
        pending = await the_pending_approval(client, handle.id)
        assert payments.count() == 0  # called from code, still asked first
        await decisions.approve(client, handle.id, pending.step_id, reviewer="grace")
        result = await handle.result()
    assert result.output == "Paid from code." and payments.count() == 1
    sent_back = api.message_requests[1].body["messages"][1]["content"]
    assert sent_back == [run_code, pay]


async def test_a_watcher_sees_the_search_and_the_ledger_names_it(
    client: Client, task_queue: str, tmp_path: Path, api: FakeMessagesAPI, claude: Claude
) -> None:
    agent = Agent(
        name="searcher", model="claude-sonnet-4-6", system="Search.", server_tools=[web_search()]
    )
    api.enqueue_message(SEARCH, RESULTS, CITED, text("No advisories."), event_delay=0.05)
    async with running_worker(client, [agent], task_queue, claude=claude(api)):
        handle = await start_run(client, "searcher", "who is ada", task_queue=task_queue)
        seen = [e async for e in runs.events(client, handle.id)]
        result = await handle.result()
    said = "".join(e.text for e in seen if isinstance(e, TextDelta))
    assert "[web_search: ada lovelace bank details]" in said and CITED["text"] in said
    assert said.endswith(f"{CITED['text']}\nNo advisories."), said  # two blocks, two lines
    assert result.output.endswith(f"{CITED['text']}\nNo advisories."), result.output
    (model,) = [r for r in result.ledger if r.kind == "model"]
    assert "web_search (server)" in model.summary
