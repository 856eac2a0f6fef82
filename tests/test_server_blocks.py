"""Claude's server tool blocks and citations are kept, byte for byte, and sent back (issue 30.2).

A reply that searched the web holds `server_tool_use` and `web_search_tool_result` blocks, and
text citing the results. Waypoint kept only text, thinking and tool calls: the next request
went without them (which the API rejects for a turn that used a server tool) and citations were
lost. Played through the real `anthropic` client against the local Messages API server, with
the worker replaced between the two model calls, so the second sends the transcript whole.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client
from temporalio.worker import Replayer

from tests.agents import Payments, build_agent
from tests.conftest import Claude, running_worker, wait_for_state
from tests.fake_messages_api import FakeMessagesAPI, text, tool_use
from waypoint.client import decisions
from waypoint.client.runs import start_run
from waypoint.workflows import AgentWorkflow

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


@pytest.fixture
def api() -> Iterator[FakeMessagesAPI]:
    with FakeMessagesAPI() as api:
        yield api


async def test_server_tool_blocks_and_citations_go_back_unchanged_after_a_new_worker(
    client: Client, task_queue: str, tmp_path: Path, api: FakeMessagesAPI, claude: Claude
) -> None:
    payments = Payments(tmp_path / "payments.db")
    agent = build_agent(payments, script=[], approval=True)
    pay = tool_use("pay", {"payee": "ada", "amount": 5})
    api.enqueue_message(SEARCH, RESULTS, CITED, FUTURE, pay)
    api.enqueue_message(text("Paid ada."))
    async with running_worker(
        client, [agent], task_queue, use_anthropic=True, anthropic=claude(api)
    ):
        handle = await start_run(client, "payer", "pay ada", task_queue=task_queue)
        (pending,) = (
            await wait_for_state(client, handle.id, "awaiting_approval")
        ).pending_approvals
    async with running_worker(  # a new worker: its transcript store holds nothing of the run
        client, [agent], task_queue, use_anthropic=True, anthropic=claude(api)
    ):
        await decisions.decide(client, handle.id, pending.step_id, approve=True, reviewer="grace")
        result = await handle.result()
    assert result.output == "Paid ada." and payments.count() == 1
    assert len(api.message_requests) == 2
    sent_back = api.message_requests[1].body["messages"][1]
    assert sent_back["role"] == "assistant"
    assert sent_back["content"] == [SEARCH, RESULTS, CITED, FUTURE, pay]
    history = await handle.fetch_history()
    replayer = Replayer(workflows=[AgentWorkflow], data_converter=client.data_converter)
    assert (
        await replayer.replay_workflow(history, raise_on_replay_failure=False)
    ).replay_failure is None
