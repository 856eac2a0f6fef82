"""A model that cannot run one of an agent's server tools is refused when the spec loads (30.1).

The refusal parks the run before any call is paid for, naming the model and the tool; a deploy
that fixes the agent and `resume` go on from there.
"""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest
from temporalio.client import Client

from tests.agents import Payments, build_agent
from tests.conftest import Claude, running_worker, wait_for_state
from tests.fake_messages_api import FakeMessagesAPI, text
from waypoint import Agent
from waypoint._providers.claude.catalog import server_tool_refusal
from waypoint.client.runs import start_run
from waypoint.protocol import ResumeRequest
from waypoint.server_tools import code_execution, tool_search, web_search


@pytest.mark.parametrize(
    ("model", "tool", "refused"),
    [
        ("claude-haiku-4-5-20251001", tool_search().type, True),
        ("us.anthropic.claude-sonnet-4-20250514-v1:0", tool_search("bm25").type, True),
        ("claude-sonnet-4-5@20250929", tool_search().type, False),
        ("claude-3-haiku-20240307", web_search().type, True),
        ("claude-3-5-haiku-latest", code_execution().type, False),
        ("claude-sonnet-9-9", tool_search().type, False),  # unknown: the API's 400 judges it
    ],
)
def test_a_models_support_for_a_server_tool_is_judged_by_its_canonical_id(
    model: str, tool: str, refused: bool
) -> None:
    why = server_tool_refusal(model, tool)
    assert bool(why) is refused
    assert not why or (model in why and tool in why)


async def test_a_server_tool_the_model_cannot_run_parks_the_run_before_any_call(
    client: Client, task_queue: str, tmp_path: Path, claude: Claude
) -> None:
    broken = Agent(
        name="finder",
        model="claude-haiku-4-5",
        system="Find tools.",
        tools=build_agent(Payments(tmp_path / "p.db"), script=[]).tools,
        server_tools=[tool_search()],
    )
    fixed = dataclasses.replace(broken, model="claude-sonnet-4-6")  # a model that can run it
    with FakeMessagesAPI() as api:
        api.enqueue_message(text("Found them."))
        async with running_worker(client, [broken], task_queue, claude=claude(api)):
            handle = await start_run(client, "finder", "find", task_queue=task_queue)
            parked = await wait_for_state(client, handle.id, "model_unavailable")
        assert "claude-haiku-4-5 does not support the server tool" in parked.detail
        assert "tool_search_tool_regex_20251119" in parked.detail
        assert not api.message_requests  # refused before any model call was paid for
        async with running_worker(client, [fixed], task_queue, claude=claude(api)):
            await handle.signal("resume", ResumeRequest(reviewer="ops"))
            result = await asyncio.wait_for(handle.result(), 60)
    assert result.state == "done" and result.output == "Found them."
    (request,) = api.message_requests
    assert request.body["model"] == "claude-sonnet-4-6"
