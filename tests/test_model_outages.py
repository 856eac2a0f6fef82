"""Outages park a run, never fail it; `resume` retries the step and keeps every finished one.

The real `anthropic` client against the local Messages API server, on the real dev server.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import PendingActivityState
from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
)
from temporalio.exceptions import CancelledError

from tests.agents import Payments, build_agent
from tests.conftest import Claude, running_worker, wait_for_state
from tests.fake_messages_api import (
    FakeMessagesAPI,
    redacted_thinking,
    text,
    thinking,
    tool_use,
)
from tests.support.budgets import refused_at_start
from waypoint.client import runs, views
from waypoint.client.runs import start_run
from waypoint.protocol import ModelSettings, ResumeRequest, StepOptions

TWO_TRIES = StepOptions(
    model_max_attempts=2,
    retry_initial_interval=timedelta(milliseconds=50),
    retry_max_interval=timedelta(milliseconds=100),
)


async def test_overload_past_the_retries_parks_and_resume_keeps_finished_steps(
    client: Client, task_queue: str, tmp_path: Path, api: FakeMessagesAPI, claude: Claude
) -> None:
    payments = Payments(tmp_path / "p.db")
    agent = build_agent(payments, script=[])
    api.enqueue_message(tool_use("pay", {"payee": "ada", "amount": 5}))
    api.enqueue_error(529)
    api.enqueue_error(529)
    api.enqueue_message(text("Paid ada 5."))
    async with running_worker(client, [agent], task_queue, claude=claude(api)):
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
    client: Client, task_queue: str, tmp_path: Path, api: FakeMessagesAPI, claude: Claude
) -> None:
    agent = build_agent(Payments(tmp_path / "p.db"), script=[])
    api.enqueue_error(401, message="invalid x-api-key")
    api.enqueue_message(text("Back."))
    async with running_worker(client, [agent], task_queue, claude=claude(api)):
        handle = await start_run(client, "payer", "hi", task_queue=task_queue, options=TWO_TRIES)
        parked = await wait_for_state(client, handle.id, "model_unavailable")
        assert "401" in parked.detail and len(api.message_requests) == 1  # not retried
        await handle.signal("resume", ResumeRequest(reviewer="ops"))
        assert (await handle.result()).output == "Back."


async def test_a_cost_budget_on_an_unpriced_model_is_refused_at_start(
    client: Client, task_queue: str, tmp_path: Path, api: FakeMessagesAPI, claude: Claude
) -> None:
    agent = build_agent(Payments(tmp_path / "p.db"), script=[])
    agent.model = "claude-unpriced-9"
    why = await refused_at_start(client, task_queue, agent, api, claude(api), 0.000001)
    assert "no price is known for model 'claude-unpriced-9'" in why


async def test_an_unknown_model_id_parks_the_run_at_start(
    client: Client, task_queue: str, tmp_path: Path, claude: Claude
) -> None:
    agent = build_agent(Payments(tmp_path / "p.db"), script=[])
    agent.model = "claude-sonnet-9-9"
    with FakeMessagesAPI(models={"claude-sonnet-4-6"}) as api:
        api.enqueue_message(text("Hello."))
        async with running_worker(client, [agent], task_queue, claude=claude(api)):
            handle = await start_run(client, "payer", "hi", task_queue=task_queue)
            parked = await wait_for_state(client, handle.id, "model_unavailable")
            assert "unknown model id 'claude-sonnet-9-9'" in parked.detail
            assert not api.message_requests  # caught before any model call was paid for
            await handle.terminate("test over")


async def test_prompt_too_long_compacts_and_retries_instead_of_failing(
    client: Client, task_queue: str, tmp_path: Path, claude: Claude
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
        async with running_worker(client, [agent], task_queue, claude=claude(api)):
            handle = await start_run(client, "payer", "go", task_queue=task_queue)
            result = await handle.result()
    steps = [(r.step_id, r.status) for r in result.ledger if r.kind == "model"]
    assert ("t5.model", "error") in steps  # the 400: context window exceeded
    assert any(s.startswith("t5.compact.ctx") for s, _ in steps)
    assert ("t5.model.c1", "completed") in steps
    assert result.output == "Done." and result.state == "done"


async def test_a_thinking_tool_loop_sends_thinking_back_as_the_api_requires(
    client: Client, task_queue: str, tmp_path: Path, claude: Claude
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
        async with running_worker(client, [agent], task_queue, claude=claude(api)):
            handle = await start_run(client, "payer", "add", task_queue=task_queue)
            # Without its thinking the second call is a 400 and the run parks: never finishes.
            result = await asyncio.wait_for(handle.result(), 60)
        first, second = api.message_requests
    assert result.output == "It is 42." and result.state == "done"
    assert first.body["thinking"] == {"type": "adaptive"}
    sent_back = second.body["messages"][1]["content"]
    assert [b["type"] for b in sent_back] == ["thinking", "redacted_thinking", "tool_use"]
    assert sent_back[0]["signature"] == api.sign("Two plus forty is forty-two.")


async def test_a_cancel_during_a_model_step_ends_the_run_and_counts_the_answer_it_paid_for(
    client: Client, task_queue: str, tmp_path: Path, api: FakeMessagesAPI, claude: Claude
) -> None:
    """A cancel is not an outage: the run ends cancelled, not parked, its step's tokens kept.

    The answer streams for seconds; the cancel lands after the step's first heartbeat, and this
    worker sends the next one only 48 s later (0.8 of the 60 s timeout, not every 2 s), so the
    answer comes first: the API billed it, so the run must count it.
    """
    agent = build_agent(Payments(tmp_path / "p.db"), script=[])
    api.enqueue_message(text("Paid nobody; a long answer."), event_delay=0.5)
    async with running_worker(
        client,
        [agent],
        task_queue,
        claude=claude(api),
        max_heartbeat_throttle_interval=timedelta(seconds=60),
    ):
        handle = await start_run(client, "payer", "pay", task_queue=task_queue)
        await step_started(handle, "waypoint.call_model")
        await handle.cancel()
        with pytest.raises(WorkflowFailureError) as ended:
            await asyncio.wait_for(handle.result(), 30)  # a swallowed cancel parks instead
        status = await runs.status(client, handle.id)
        ledger = await runs.ledger(client, handle.id)
        memo = await views.memo(await handle.describe())
    assert isinstance(ended.value.cause, CancelledError)
    assert (await handle.describe()).status == WorkflowExecutionStatus.CANCELED
    billed = [u["input_tokens"] + u["output_tokens"] for u in api.usages]
    assert len(api.message_requests) == 1 and billed == [15]  # asked once, never again
    model = next(r for r in ledger if r.step_id == "t1.model")
    assert (model.status, model.tokens) == ("completed", 15)
    assert (status.state, status.total_tokens) == ("cancelled", 15)
    assert memo is not None and (memo.state, memo.total_tokens) == ("cancelled", 15)


async def test_a_cancel_that_stops_a_model_step_counts_what_it_had_spent(
    client: Client, task_queue: str, tmp_path: Path, api: FakeMessagesAPI, claude: Claude
) -> None:
    """The next heartbeat (within 2 s) brings the cancel and the stream stops; the step says
    what its provider reported it had spent by then: the prompt's tokens, not yet the output."""
    agent = build_agent(Payments(tmp_path / "p.db"), script=[])
    api.enqueue_message(text("Paid nobody; a long answer."), event_delay=1.0)
    async with running_worker(client, [agent], task_queue, claude=claude(api)):
        handle = await start_run(client, "payer", "pay", task_queue=task_queue)
        await step_started(handle, "waypoint.call_model")
        await handle.cancel()
        with pytest.raises(WorkflowFailureError) as ended:
            await asyncio.wait_for(handle.result(), 30)
        ledger = await runs.ledger(client, handle.id)
        status = await runs.status(client, handle.id)
    assert isinstance(ended.value.cause, CancelledError)
    assert len(api.message_requests) == 1  # never asked again
    model = next(r for r in ledger if r.step_id == "t1.model")
    assert model.status == "cancelled" and 10 <= model.tokens < 15, model  # the input so far
    assert model.summary == f"cancelled with the run: {model.tokens} tokens reported so far"
    assert (status.state, status.total_tokens) == ("cancelled", model.tokens)
    assert not status.cost_known  # the output was not reported: its cost is not known


async def test_an_answer_that_arrives_with_the_cancel_is_counted(
    client: Client, task_queue: str, tmp_path: Path, api: FakeMessagesAPI, claude: Claude
) -> None:
    """The model's answer and the cancel reach the run in one workflow task.

    No worker runs the workflow while the answer comes and the cancel is sent; the answer's
    worker runs activities only. temporalio raises a cancel there, not the answer.
    """
    agent = build_agent(Payments(tmp_path / "p.db"), script=[])
    api.enqueue_message(text("Paid nobody; a long answer."), event_delay=0.3)
    model = {"claude": claude(api)}
    async with running_worker(client, [agent], task_queue, workflows=[], **model):
        async with running_worker(client, [agent], task_queue, no_remote_activities=True, **model):
            handle = await start_run(client, "payer", "pay", task_queue=task_queue)
            await step_started(handle, "waypoint.call_model")
        await handle.cancel()
        while (await handle.describe()).raw_description.pending_activities:
            await asyncio.sleep(0.05)  # answered, with nobody to tell yet
        assert len(api.usages) == 1
        async with running_worker(client, [agent], task_queue, no_remote_activities=True, **model):
            with pytest.raises(WorkflowFailureError) as ended:
                await asyncio.wait_for(handle.result(), 30)
            status = await runs.status(client, handle.id)
    assert isinstance(ended.value.cause, CancelledError)
    assert (status.state, status.total_tokens) == ("cancelled", 15)


async def step_started(handle: WorkflowHandle[Any, Any], activity: str) -> None:
    """Wait until a pending `activity` of the run has started and heartbeated once."""
    deadline = asyncio.get_running_loop().time() + 20
    while True:
        pending = (await handle.describe()).raw_description.pending_activities
        if any(
            a.activity_type.name == activity
            and a.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED
            and a.HasField("last_heartbeat_time")
            for a in pending
        ):
            return
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"{activity} did not start: {pending}")
        await asyncio.sleep(0.05)
