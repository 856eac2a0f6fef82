"""A whole run through the real `anthropic` client against a local Messages API server.

Temporal owns retries: every HTTP request the fake server sees is one Temporal activity attempt.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from temporalio.client import Client
from temporalio.worker import Worker

from tests.agents import Payments, build_agent
from tests.conftest import Claude, running_worker, wait_for_state
from tests.fake_messages_api import FakeMessagesAPI, text, tool_use
from waypoint import WaypointPlugin, WorkerOptions
from waypoint.client import runs
from waypoint.client.runs import start_run
from waypoint.protocol import ResumeRequest, StepOptions

FAST = StepOptions(
    retry_initial_interval=timedelta(milliseconds=50),
    retry_max_interval=timedelta(milliseconds=200),
)


async def test_claude_run_retries_429_and_529_once_per_temporal_attempt(
    client: Client, task_queue: str, tmp_path: Path, api: FakeMessagesAPI, claude: Claude
) -> None:
    payments = Payments(tmp_path / "payments.db")
    agent = build_agent(payments, script=[])
    api.enqueue_error(429, retry_after=1)
    api.enqueue_message(
        text("Adding."),
        tool_use("add", {"a": 2, "b": 40}),
        usage={"input_tokens": 1000, "output_tokens": 100},
    )
    api.enqueue_error(529)
    api.enqueue_message(text("It is 42."), usage={"input_tokens": 1200, "output_tokens": 20})
    async with running_worker(client, [agent], task_queue, claude=claude(api)):
        handle = await start_run(client, "payer", "add", task_queue=task_queue, options=FAST)
        result = await handle.result()
    assert result.output == "It is 42."
    assert len(api.message_requests) == 4
    models = [r for r in result.ledger if r.kind == "model"]
    assert [(r.step_id, r.attempt) for r in models] == [("t1.model", 2), ("t2.model", 2)]
    tool_result = api.message_requests[2].body["messages"][-1]["content"][0]
    assert tool_result["type"] == "tool_result" and tool_result["content"] == "42"
    assert api.message_requests[0].body["tools"][0]["name"] == "add"
    assert api.message_requests[0].headers["authorization"] == "Bearer test"
    assert result.cost_known
    expected = (1000 * 3 + 100 * 15 + 1200 * 3 + 20 * 15) / 1_000_000
    assert result.cost_usd == pytest.approx(expected)


async def test_claude_400_parks_the_run_in_request_invalid_and_resume_sends_it_again(
    client: Client, task_queue: str, tmp_path: Path, api: FakeMessagesAPI, claude: Claude
) -> None:
    """Sent again unchanged, an invalid request fails the same way: the run says so and waits.

    It parked as `model_unavailable`, an outage that `resume` fixes, so an operator (the
    torture driver, seed 92) resumed it 64 times into the same 400.
    """
    agent = build_agent(Payments(tmp_path / "payments.db"), script=[])
    api.enqueue_error(400, message="messages: roles must alternate")
    api.enqueue_message(text("Fine now."))
    async with running_worker(client, [agent], task_queue, claude=claude(api)):
        handle = await start_run(client, "payer", "add", task_queue=task_queue, options=FAST)
        parked = await wait_for_state(client, handle.id, "request_invalid")
        assert len(api.message_requests) == 1  # not retried, not sent again by itself
        step = (await runs.ledger(client, handle.id))[-1]
        assert step.step_id == "t1.model" and step.summary.startswith("parked:")
        await handle.signal("resume", ResumeRequest(reviewer="ops"))  # once the cause is fixed
        result = await handle.result()
    assert "400 (invalid_request_error): messages: roles must alternate" in parked.detail
    assert result.output == "Fine now." and len(api.message_requests) == 2


async def test_a_worker_closes_the_claude_client_it_built(
    client: Client,
    task_queue: str,
    tmp_path: Path,
    api: FakeMessagesAPI,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Left open, a client's finalizer schedules its close on whatever loop runs when it is
    collected: in a later workflow, a stray task the SDK reports as destroyed while pending."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", api.base_url)
    api.enqueue_message(text("Hi."))
    agent = build_agent(Payments(tmp_path / "p.db"), script=[])
    plugin = WaypointPlugin([agent], WorkerOptions(claude="anthropic"))
    async with Worker(client, task_queue=task_queue, plugins=[plugin]):
        handle = await start_run(client, "payer", "hi", task_queue=task_queue, options=FAST)
        assert (await handle.result()).output == "Hi."
        (claude,) = plugin._wiring.closing  # built from the environment: the plugin's to close
        sdk = claude._client
        assert sdk is not None and not sdk.is_closed()
    assert sdk.is_closed()
