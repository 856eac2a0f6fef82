"""Claude's server tools where durability is tested: a kill, a compaction, a budget (issue 30.9).

The real `anthropic` client against the local Messages API server, on the real dev server.
A search runs at Anthropic inside a model call, so the call's record is all there is of it:
a worker SIGKILLed after that call must not make it again (the search would be paid twice) and
the next worker must send its blocks back as they came; a compaction must never split a search
from its result; and a call's `max_uses` searches are reserved against `max_cost_usd` before it
is sent, so a run parks rather than cross its cap.

`agents` is the app the kill test's worker subprocess runs (`--app`).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from tests import harness_app
from tests.agents import Payments, build_agent
from tests.conftest import Claude, running_worker, wait_for_state, wait_until
from tests.fake_messages_api import FakeMessagesAPI, text, tool_use
from waypoint import Agent
from waypoint._activities.step_log import read_step_log
from waypoint._providers.pricing import cost_usd, use_price_file
from waypoint.client import runs
from waypoint.protocol import Limits, Usage
from waypoint.server_tools import web_search
from waypoint.testing import KILL_TEST_OPTIONS, WorkerProcess, completed_steps
from waypoint.testing.report import TASK_TIMEOUT

ROOT = Path(__file__).parent.parent
APP = "tests.test_server_tools_durable:agents"
MODEL = "claude-sonnet-4-6"
KILL_OPTIONS = KILL_TEST_OPTIONS.model_copy(update={"tool_heartbeat_timeout": timedelta(seconds=2)})
"""The harness's short timeouts; the killed worker's note is retried two seconds after it died."""
PAGE = "x" * 6_000
"""About 1,500 tokens: four cited pages fill a 6,000-token window, so turn 5 must compact."""


def searched(i: int, cite: str = "Ada banks with the Analytical Bank.") -> list[dict[str, Any]]:
    """Claude's search number `i`, its result and the text citing it, as the API sends them."""
    call_id = f"srvtoolu_durable{i}"
    url, title = f"https://example.org/ada/{i}", f"Ada's page {i}"
    return [
        {
            "type": "server_tool_use",
            "id": call_id,
            "name": "web_search",
            "input": {"query": f"ada lovelace bank {i}"},
        },
        {
            "type": "web_search_tool_result",
            "tool_use_id": call_id,
            "content": [
                {
                    "type": "web_search_result",
                    "url": url,
                    "title": title,
                    "encrypted_content": f"EqgfCioIARgBIiQ3YTAw{i}MjY1Mi1mZjM5",
                    "page_age": "April 30, 2025",
                }
            ],
        },
        {
            "type": "text",
            "text": cite,
            "citations": [
                {
                    "type": "web_search_result_location",
                    "url": url,
                    "title": title,
                    "encrypted_index": f"Eo8BCioIAhgBIiQy{i}YjQ0OWJmZi1lNm",
                    "cited_text": "Ada keeps her account at the Analytical Bank.",
                }
            ],
        },
    ]


def searches(n: int) -> dict[str, Any]:
    """A reply's usage when it searched `n` times."""
    return {
        "input_tokens": 1000,
        "output_tokens": 100,
        "server_tool_use": {"web_search_requests": n, "web_fetch_requests": 0},
    }


def billed(api: FakeMessagesAPI) -> float:
    """What the API's answers cost at the model's prices, searches included."""
    total = 0.0
    for usage in api.usages:
        made = usage.get("server_tool_use", {}).get("web_search_requests", 0)
        cost = cost_usd(
            MODEL,
            Usage(
                input_tokens=usage["input_tokens"],
                output_tokens=usage["output_tokens"],
                web_search_requests=made,
            ),
        )
        assert cost is not None
        total += cost
    return total


def canonical(blocks: list[dict[str, Any]]) -> str:
    """Blocks as JSON with sorted keys: the SDK parses a block into a model of sorted fields, so
    the order of an object's members is not kept (JSON gives it no meaning), every value is."""
    return json.dumps(blocks, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def unpaired(messages: list[dict[str, Any]]) -> list[str]:
    """Server tool calls without their result, or results without their call, by message.

    A search and its result live in one assistant turn; a paused turn's continuation is a
    second assistant message right after the first, which the API joins to it, so consecutive
    assistant messages are one turn. Only the request's last message may hold a call without
    its result: that is a paused turn the API is asked to continue.
    """
    found: list[str] = []
    calls: dict[str, int] = {}
    for m, message in enumerate([*messages, {"role": "user", "content": []}]):
        content = message.get("content")
        blocks = content if isinstance(content, list) else []
        if message["role"] != "assistant":
            if m < len(messages) or not messages or messages[-1]["role"] != "assistant":
                found += [f"messages.{i}: {c} has no result" for c, i in calls.items()]
            calls = {}
            continue
        for block in blocks:
            if block["type"] == "server_tool_use":
                calls[block["id"]] = m
            elif block["type"].endswith("_tool_result") and block["type"] != "tool_result":
                if calls.pop(block["tool_use_id"], None) is None:
                    found.append(f"messages.{m}: result of {block['tool_use_id']} without its call")
    return found


def without_breakpoints(content: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A message's blocks without the prompt cache's markers (the request's, not the block's)."""
    return [{k: v for k, v in b.items() if k != "cache_control"} for b in content]


@pytest.fixture
def api() -> Iterator[FakeMessagesAPI]:
    with FakeMessagesAPI() as api:
        yield api


# --- a kill between a server-tool turn and the next -----------------------------------------


def agents() -> list[Agent]:
    """The searcher: it searches the web (twice at most a call), then notes what it found.

    The note is `tests.harness_app`'s: a row per effect key in `$HARNESS_DIR`, held while
    `$HARNESS_DIR/hold` exists (it touches `holding` first).
    """
    (asker,) = [a for a in harness_app.agents() if a.name == "asker"]
    (note,) = [t for t in asker.tools if t.name == "note"]
    return [
        Agent(
            name="searcher",
            model=MODEL,
            system="Search the web, then note what you found.",
            tools=[note],
            server_tools=[web_search(max_uses=2)],
        )
    ]


async def test_a_worker_killed_after_a_search_turn_never_searches_again_and_sends_it_back(
    client: Client,
    env: WorkflowEnvironment,
    task_queue: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    api: FakeMessagesAPI,
    claude: Claude,
) -> None:
    folder = tmp_path / "harness"
    folder.mkdir()
    monkeypatch.setenv("HARNESS_DIR", str(folder))  # the new worker's note, and count_effects
    (folder / "hold").touch()
    step_log = tmp_path / "steps.log"
    reply = [*searched(1), tool_use("note", {"text": "the Analytical Bank"})]
    api.enqueue_message(*reply, usage=searches(1))
    api.enqueue_message(text("Noted."))
    killed = WorkerProcess(
        APP,
        {
            **os.environ,
            "TEMPORAL_ADDRESS": env.client.service_client.config.target_host,
            "WAYPOINT_TASK_QUEUE": task_queue,
            "WAYPOINT_STEP_LOG": str(step_log),
            "HARNESS_DIR": str(folder),
            "ANTHROPIC_API_KEY": "test",
            "ANTHROPIC_BASE_URL": api.base_url,
            "PYTHONPATH": str(ROOT),
        },
        tmp_path / "worker.log",
    )
    try:
        killed.start()
        handle = await runs.start_run(
            client,
            "searcher",
            "where does ada bank?",
            task_queue=task_queue,
            options=KILL_OPTIONS,
            task_timeout=TASK_TIMEOUT,
        )

        async def noting() -> bool:
            return (folder / "holding").exists()

        await wait_until(noting, "the note after the search turn started")
        assert "t1.model" in await completed_steps(client, handle.id)  # recorded, then killed
        killed.kill()
    finally:
        killed.kill()
    (folder / "hold").unlink()
    async with running_worker(client, agents(), task_queue, claude=claude(api), step_log=step_log):
        result = await asyncio.wait_for(handle.result(), 30)

    assert result.state == "done" and result.output == "Noted."
    first, second = api.message_requests  # the first never again: its search not made twice
    assert len(first.body["messages"]) == 1 and len(api.usages) == 2
    sent_back = second.body["messages"][1]
    assert sent_back["role"] == "assistant"
    assert canonical(sent_back["content"]) == canonical(reply)  # every block as the API sent it
    executed = [e.step_id for e in read_step_log(step_log, handle.id)]
    # t2.model runs twice: first refused for want of the transcript the killed worker held
    # (no request made), then with the transcript resent whole.
    assert executed.count("t1.model") == 1
    assert executed.count("t1.tool.1.note") == 2  # killed while it ran, then on the new worker
    note = next(r for r in result.ledger if r.step_id == "t1.tool.1.note")
    assert note.effect_key and harness_app.count_effects(note.effect_key) == 1
    assert result.cost_usd == pytest.approx(billed(api))  # one search, paid for once


# --- a compaction with server blocks --------------------------------------------------------


async def test_a_compaction_never_splits_a_search_from_its_result_and_keeps_the_rest(
    client: Client, task_queue: str, tmp_path: Path, claude: Claude
) -> None:
    plain = build_agent(Payments(tmp_path / "p.db"), script=[])
    agent = Agent(
        name="researcher",
        model=MODEL,
        system="Research, then add.",
        tools=plain.tools,
        server_tools=[web_search(max_uses=2)],
    )
    add = [tool_use("add", {"a": i, "b": 1}, id=f"toolu_durable{i}") for i in range(5)]
    paused, continued = searched(2, PAGE)[:1], [*searched(2, PAGE)[1:], add[2]]
    replies = [
        [*searched(1, PAGE), add[1]],
        paused,  # turn 2 pauses after its search; its result comes with the continuation
        continued,
        [*searched(3, PAGE), add[3]],
        [*searched(4, PAGE), add[4]],
    ]
    with FakeMessagesAPI(count_tokens=True, context_window=6_000) as api:
        for content in replies:
            stop = "pause_turn" if content is paused else None
            api.enqueue_message(*content, stop_reason=stop)
        api.enqueue_message(text("summary of the early turns"))
        api.enqueue_message(text("Done."))
        async with running_worker(
            client,
            [agent],
            task_queue,
            claude=claude(api),
            max_cached_workflows=0,  # every task replays the compaction from history
        ):
            handle = await runs.start_run(client, "researcher", "go", task_queue=task_queue)
            result = await asyncio.wait_for(handle.result(), 60)
    assert result.state == "done" and result.output == "Done."
    steps = [r.step_id for r in result.ledger if r.kind == "model"]
    assert "t5.compact.ctx" in steps and steps[-1] == "t5.model.c1", steps
    bodies = [r.body for r in api.message_requests]
    (summary,) = [i for i, b in enumerate(bodies) if "You compact" in json.dumps(b["system"])]
    for n, body in enumerate(bodies):
        assert unpaired(body["messages"]) == [], f"request {n}"
    after = bodies[summary + 1 :]
    assert after, "no request after the compaction"
    for body in after:
        head, *kept = body["messages"]
        assert "summarised by step t5.compact.ctx" in head["content"][0]["text"]
        replied = [without_breakpoints(m["content"]) for m in kept if m["role"] == "assistant"]
        assert replied, "the compaction kept no turn"
        assert replied == replies[len(replies) - len(replied) :]  # whole replies, as sent
        # Six messages (three turns) back is turn 2's continuation: the tail starts at the
        # paused reply it continues, never between the two.
        assert replied[0] == paused


# --- a budget the searches' worst case would cross ------------------------------------------


@pytest.fixture
def search_prices(tmp_path: Path) -> Iterator[float]:
    """Negotiated prices from a price override file: cheap tokens, $0.10 a search."""
    path = tmp_path / "prices.toml"
    path.write_text(f'["{MODEL}"]\ninput = 1\noutput = 1\nweb_searches_per_1k = 100\n')
    use_price_file(path)
    yield 0.10
    use_price_file(None)


async def test_a_call_whose_searches_could_cross_the_cost_cap_parks_before_it_is_sent(
    client: Client,
    task_queue: str,
    tmp_path: Path,
    api: FakeMessagesAPI,
    claude: Claude,
    search_prices: float,
) -> None:
    plain = build_agent(Payments(tmp_path / "p.db"), script=[])
    cap = 0.5
    agent = Agent(
        name="researcher",
        model=MODEL,
        system="Research, then add.",
        tools=plain.tools,
        server_tools=[web_search(max_uses=3)],  # up to $0.30 of searches a call
        limits=Limits(max_cost_usd=cap, max_tokens_per_call=500),
    )
    # t1.model may cost $0.30 and a little, and costs $0.20 and a little. Its tokens alone
    # would leave t2.model room; its three searches would not: $0.20 + $0.30 > $0.50.
    two = [*searched(1), *searched(2)[:2], tool_use("add", {"a": 1, "b": 2})]
    api.enqueue_message(*two, usage=searches(2))
    api.enqueue_message(*searched(3), usage=searches(3))
    async with running_worker(client, [agent], task_queue, claude=claude(api)):
        handle = await runs.start_run(client, "researcher", "look", task_queue=task_queue)
        parked = await wait_for_state(client, handle.id, "limit_reached")
        assert len(api.message_requests) == 1  # t2.model never sent
        ledger = await runs.ledger(client, handle.id)
        await handle.signal("raise_limits", agent.limits.model_copy(update={"max_cost_usd": 1.0}))
        result = await asyncio.wait_for(handle.result(), 30)

    assert parked.detail.startswith(f"max_cost_usd={cap} would be crossed: t2.model may cost $0.30")
    worst, left = map(float, re.findall(r"\$(\d+\.\d+)", parked.detail))
    assert worst - 3 * search_prices <= left < worst  # refused for its searches, not its tokens
    assert 2 * search_prices < parked.cost_usd <= cap
    assert parked.cost_usd == pytest.approx(sum(r.cost_usd or 0 for r in ledger))
    assert result.state == "done" and len(api.message_requests) == 2
    assert result.cost_usd == pytest.approx(sum(r.cost_usd or 0 for r in result.ledger))
    assert result.cost_usd == pytest.approx(billed(api)) and result.cost_usd <= 1.0
    assert result.cost_usd > cap  # what the cap held back: the second call's three searches
