"""A tool's search results and documents go to Claude as the API documents them, citable (30.2).

The real `anthropic` client against the local Messages API server, which checks the shapes
(`tests/fake_messages_api/rules.py`); the citations Claude writes on them come back unchanged.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import BaseModel
from temporalio.client import Client

from tests.conftest import Claude, running_worker
from tests.fake_messages_api import FakeMessagesAPI, text, tool_use
from waypoint import Agent, document, search_result, tool
from waypoint.client.runs import start_run
from waypoint.errors import ContentError
from waypoint.protocol import DocumentBlock, Message, SearchResultBlock, TextBlock

CITED: dict[str, Any] = {
    "type": "text",
    "text": "The bank opens at nine.",
    "citations": [
        {
            "type": "search_result_location",
            "source": "https://wiki.example.org/bank",
            "title": "Bank hours",
            "cited_text": "Opens at 9:00.",
            "search_result_index": 0,
            "start_block_index": 0,
            "end_block_index": 0,
        }
    ],
}


class Query(BaseModel):
    q: str


@tool("read")
async def lookup(args: Query) -> list[object]:
    """Look it up in the wiki."""
    return [
        "One result:",
        search_result("https://wiki.example.org/bank", "Bank hours", ["Opens at 9:00.", "Shut."]),
    ]


@tool("read")
async def handbook(args: Query) -> DocumentBlock:
    """The staff handbook."""
    return document(b"Staff arrive at 8:30.", "Handbook", citations=True, context="2026 edition")


@pytest.fixture
def api() -> Iterator[FakeMessagesAPI]:
    with FakeMessagesAPI() as api:
        yield api


def researcher() -> Agent:
    return Agent(name="wiki", model="claude-sonnet-4-6", system="Cite.", tools=[lookup, handbook])


async def test_search_results_and_documents_are_sent_citable_and_citations_come_back(
    client: Client, task_queue: str, api: FakeMessagesAPI, claude: Claude
) -> None:
    api.enqueue_message(tool_use("lookup", {"q": "bank"}, id="toolu_1"))
    api.enqueue_message(CITED, tool_use("handbook", {"q": "arrive"}, id="toolu_2"))
    api.enqueue_message(text("Nine, and staff at half past eight."))
    async with running_worker(client, [researcher()], task_queue, claude=claude(api)):
        handle = await start_run(client, "wiki", "When?", task_queue=task_queue)
        result = await handle.result()
    assert result.state == "done"
    first, second, third = (r.body["messages"] for r in api.message_requests)
    (found,) = [b for b in second[-1]["content"] if b["type"] == "tool_result"]
    assert found["content"] == [
        {"type": "text", "text": "One result:"},
        {
            "type": "search_result",
            "source": "https://wiki.example.org/bank",
            "title": "Bank hours",
            "content": [
                {"type": "text", "text": "Opens at 9:00."},
                {"type": "text", "text": "Shut."},
            ],
            "citations": {"enabled": True},
        },
    ]
    assert third[-2]["content"][0] == CITED  # Claude's citation of it, sent back as it came
    (doc,) = [b for b in third[-1]["content"] if b["type"] == "tool_result"][0]["content"]
    assert doc == {
        "type": "document",
        "source": {"type": "text", "media_type": "text/plain", "data": "Staff arrive at 8:30."},
        "title": "Handbook",
        "context": "2026 edition",
        "citations": {"enabled": True},
    }
    assert len(first) == 1


def test_a_search_result_with_nothing_to_cite_is_refused_where_it_is_built() -> None:
    with pytest.raises(ContentError, match="needs a source, a title and content"):
        search_result("", "Bank hours", "Opens at 9:00.")
    with pytest.raises(ContentError, match="must not be empty"):
        search_result("https://wiki.example.org/bank", "Bank hours", [""])


def test_blocks_recorded_before_these_fields_keep_their_bytes() -> None:
    """A document without citations or context dumps as before: recorded hashes hold."""
    old = DocumentBlock(media_type="text/plain", data="eA==", title="t")
    assert set(old.model_dump()) == {"type", "media_type", "data", "title"}
    kept = Message.model_validate_json(
        Message(role="user", content=[search_result("s", "t", "x")]).model_dump_json()
    )
    assert kept.content == [
        SearchResultBlock(source="s", title="t", content=[TextBlock(text="x")], citations=True)
    ]


def test_the_local_api_refuses_a_search_result_shaped_otherwise() -> None:
    """The shapes the test above passes are checked, not assumed."""
    from tests.fake_messages_api.rules import PromptError, Signer, check

    untitled = {"type": "search_result", "source": "s", "content": [{"type": "text", "text": "x"}]}
    answer = {"type": "tool_result", "tool_use_id": "toolu_1", "content": [untitled]}
    body = {"messages": [{"role": "user", "content": [answer]}]}
    with pytest.raises(PromptError, match=r"messages\.0\.content\.0\.content\.0\.title"):
        check(body, Signer())
    flag = {**untitled, "title": "t", "citations": True}
    with pytest.raises(PromptError, match="citations.enabled"):
        check({"messages": [{"role": "user", "content": [flag]}]}, Signer())
