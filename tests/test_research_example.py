"""docs/claude.md's research agent: Claude's web search, played offline by the scripted model."""

from __future__ import annotations

from temporalio.client import Client

from examples.research.agent import agents
from tests.conftest import running_worker
from waypoint.client.runs import start_run
from waypoint.protocol import AgentState, ServerBlock, TextBlock


async def test_the_research_example_answers_with_a_cited_search(
    client: Client, task_queue: str
) -> None:
    async with running_worker(client, agents, task_queue):
        handle = await start_run(
            client, "researcher", "who wrote the first program?", task_queue=task_queue
        )
        result = await handle.result()
        state = await handle.query("state", result_type=AgentState)
    assert result.state == "done" and "Note G" in (result.output or "")
    (model,) = [r for r in result.ledger if r.kind == "model"]
    assert "web_search (server)" in model.summary
    assert model.cost_usd == 0.0  # the scripted model, labelled so, costs nothing
    search, found, cited = state.messages[-1].content
    assert isinstance(search, ServerBlock) and search.block["name"] == "web_search"
    assert isinstance(found, ServerBlock) and found.type == "web_search_tool_result"
    assert isinstance(cited, TextBlock) and cited.citations and "scripted" in cited.text
