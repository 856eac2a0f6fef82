"""Outages park a run, never fail it; `resume` retries the step and keeps every finished one.

The real `anthropic` client against the local Messages API server, on the real dev server.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowFailureError

from tests.agents import Payments, build_agent
from tests.conftest import running_worker, wait_for_state
from tests.fake_messages_api import (
    FakeMessagesAPI,
    redacted_thinking,
    text,
    thinking,
    tool_use,
)
from tests.test_claude_run import claude
from waypoint.client import runs
from waypoint.client.runs import start_run
from waypoint.protocol import Limits, ModelSettings, ResumeRequest, StepOptions

TWO_TRIES = StepOptions(
    model_max_attempts=2,
    retry_initial_interval=timedelta(milliseconds=50),
    retry_max_interval=timedelta(milliseconds=100),
)


@pytest.fixture
def api() -> Iterator[FakeMessagesAPI]:
    with FakeMessagesAPI() as api:
        yield api


async def test_overload_past_the_retries_parks_and_resume_keeps_finished_steps(
    client: Client, task_queue: str, tmp_path: Path, api: FakeMessagesAPI
) -> None:
    payments = Payments(tmp_path / "p.db")
    agent = build_agent(payments, script=[])
    api.enqueue_message(tool_use("pay", {"payee": "ada", "amount": 5}))
    api.enqueue_error(529)
    api.enqueue_error(529)
    api.enqueue_message(text("Paid ada 5."))
    async with running_worker(
        client, [agent], task_queue, use_anthropic=True, anthropic=claude(api)
    ):
        handle = await start_run(client, "payer", "pay", task_queue=task_queue, options=TWO_TRIES)
        parked = await wait_for_state(client, handle.id, "model_unavailable")
        assert "529" in parked.detail and len(api.message_requests) == 3
        ledger = await runs.ledger(client, handle.id)
        assert ledger[-1].step_id == "t2.model" and ledger[-1].summary.startswith("parked:")
        await handle.signal("resume", ResumeRequest(reviewer="ops"))
        result = await handle.result()
    assert result.output == "Paid ada 5." and result.state == "done"
    assert payments.count() == 1 and payments.faults.executions == 1
    assert len(api.message_requests) == 4  # t1.model once, t2.model 2 tries + 1 after resume
    assert [r.step_id for r in result.ledger if r.kind == "model"] == ["t1.model", "t2.model"]


async def test_a_rotated_key_parks_until_resume(
    client: Client, task_queue: str, tmp_path: Path, api: FakeMessagesAPI
) -> None:
    agent = build_agent(Payments(tmp_path / "p.db"), script=[])
    api.enqueue_error(401, message="invalid x-api-key")
    api.enqueue_message(text("Back."))
    async with running_worker(
        client, [agent], task_queue, use_anthropic=True, anthropic=claude(api)
    ):
        handle = await start_run(client, "payer", "hi", task_queue=task_queue, options=TWO_TRIES)
        parked = await wait_for_state(client, handle.id, "model_unavailable")
        assert "401" in parked.detail and len(api.message_requests) == 1  # not retried
        await handle.signal("resume", ResumeRequest(reviewer="ops"))
        assert (await handle.result()).output == "Back."


async def test_a_cost_budget_on_an_unpriced_model_is_refused_at_start(
    client: Client, task_queue: str, tmp_path: Path, api: FakeMessagesAPI
) -> None:
    agent = build_agent(Payments(tmp_path / "p.db"), script=[])
    agent.model = "claude-unpriced-9"
    async with running_worker(
        client, [agent], task_queue, use_anthropic=True, anthropic=claude(api)
    ):
        handle = await start_run(
            client, "payer", "hi", task_queue=task_queue, limits=Limits(max_cost_usd=0.000001)
        )
        with pytest.raises(WorkflowFailureError) as failed:
            await handle.result()
    assert "no price is known for model 'claude-unpriced-9'" in str(failed.value.cause)
    assert not api.message_requests  # refused before any model call


async def test_an_unknown_model_id_parks_the_run_at_start(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    agent = build_agent(Payments(tmp_path / "p.db"), script=[])
    agent.model = "claude-sonnet-9-9"
    with FakeMessagesAPI(models={"claude-sonnet-4-6"}) as api:
        api.enqueue_message(text("Hello."))
        async with running_worker(
            client, [agent], task_queue, use_anthropic=True, anthropic=claude(api)
        ):
            handle = await start_run(client, "payer", "hi", task_queue=task_queue)
            parked = await wait_for_state(client, handle.id, "model_unavailable")
            assert "unknown model id 'claude-sonnet-9-9'" in parked.detail
            assert not api.message_requests  # caught before any model call was paid for
            await handle.terminate("test over")


async def test_prompt_too_long_compacts_and_retries_instead_of_failing(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """The server's window is smaller than the agent thinks: its 400 makes the run compact."""
    payments = Payments(tmp_path / "p.db")
    agent = build_agent(payments, script=[])
    page = "x" * 6_000  # about 1,500 tokens a turn
    with FakeMessagesAPI(count_tokens=True, context_window=6_000) as api:
        for i in range(4):
            api.enqueue_message(text(page), tool_use("add", {"a": i, "b": 1}))
        api.enqueue_message(text("summary of the early turns"))  # the compaction step
        api.enqueue_message(text("Done."))
        async with running_worker(
            client, [agent], task_queue, use_anthropic=True, anthropic=claude(api)
        ):
            handle = await start_run(client, "payer", "go", task_queue=task_queue)
            result = await handle.result()
    steps = [(r.step_id, r.status) for r in result.ledger if r.kind == "model"]
    assert ("t5.model", "error") in steps  # the 400: context window exceeded
    assert any(s.startswith("t5.compact.ctx") for s, _ in steps)
    assert ("t5.model.c1", "completed") in steps
    assert result.output == "Done." and result.state == "done"


async def test_a_thinking_tool_loop_sends_thinking_back_as_the_api_requires(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """The server rejects a tool turn without its signed thinking, as the API does."""
    agent = build_agent(Payments(tmp_path / "p.db"), script=[])
    agent.settings = ModelSettings(thinking="adaptive")
    with FakeMessagesAPI() as api:
        api.enqueue_message(
            thinking("Two plus forty is forty-two."),
            redacted_thinking(),
            tool_use("add", {"a": 2, "b": 40}),
        )
        api.enqueue_message(thinking("Done."), text("It is 42."))
        async with running_worker(
            client, [agent], task_queue, use_anthropic=True, anthropic=claude(api)
        ):
            handle = await start_run(client, "payer", "add", task_queue=task_queue)
            # Without its thinking the second call is a 400 and the run parks: never finishes.
            result = await asyncio.wait_for(handle.result(), 60)
        first, second = api.message_requests
    assert result.output == "It is 42." and result.state == "done"
    assert first.body["thinking"] == {"type": "adaptive"}
    sent_back = second.body["messages"][1]["content"]
    assert [b["type"] for b in sent_back] == ["thinking", "redacted_thinking", "tool_use"]
    assert sent_back[0]["signature"] == api.sign("Two plus forty is forty-two.")
