"""The Anthropic provider against a local server that speaks the Messages API."""

from __future__ import annotations

import json
import logging
import socket
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from anthropic import AsyncAnthropic
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from tests.fake_messages_api import FakeMessagesAPI, text, tool_use
from waypoint.claude import AnthropicModel
from waypoint.models import (
    Message,
    ModelRequest,
    ModelSettings,
    TextBlock,
    ToolResultBlock,
    ToolSpec,
    ToolUseBlock,
    Usage,
)
from waypoint.pricing import cost_usd

MODEL = "claude-sonnet-4-6"

LOOKUP = ToolSpec(
    name="lookup_vendor",
    description="Find a vendor by name.",
    input_schema={"type": "object", "properties": {"name": {"type": "string"}}},
    kind="read",
    schema_hash="h1",
)


def request(
    *messages: Message,
    model: str = MODEL,
    system: str = "Be brief.",
    settings: ModelSettings | None = None,
    max_tokens: int = 1024,
) -> ModelRequest:
    return ModelRequest(
        step_id="t1.model",
        turn=1,
        model=model,
        provider="anthropic",
        agent="onboarding",
        system=system,
        tools=[LOOKUP],
        messages=list(messages) or [Message(role="user", content=[TextBlock(text="Onboard Acme")])],
        max_tokens=max_tokens,
        settings=settings or ModelSettings(),
    )


@pytest.fixture
def api() -> Iterator[FakeMessagesAPI]:
    with FakeMessagesAPI() as api:
        yield api


@pytest.fixture
async def client(api: FakeMessagesAPI) -> AsyncIterator[AsyncAnthropic]:
    async with AsyncAnthropic(base_url=api.base_url, api_key="test", max_retries=0) as client:
        yield client


@pytest.fixture
def model(client: AsyncAnthropic) -> AnthropicModel:
    return AnthropicModel(client)


async def failure(model: AnthropicModel, req: ModelRequest | None = None) -> ApplicationError:
    with pytest.raises(ApplicationError) as raised:
        await model.complete(req or request())
    return raised.value


# --- Answers --------------------------------------------------------------------------------


async def test_tool_use_answer_becomes_tool_use_block(
    api: FakeMessagesAPI, model: AnthropicModel
) -> None:
    arguments = {"name": "Acme Corp", "filters": {"country": "DE", "tags": ["new", "eu"]}}
    api.enqueue_message(text("Looking it up."), tool_use("lookup_vendor", arguments, id="toolu_01"))

    response = await model.complete(request())

    assert response.stop_reason == "tool_use"
    assert response.content == [
        TextBlock(text="Looking it up."),
        ToolUseBlock(id="toolu_01", name="lookup_vendor", input=arguments),
    ]
    assert response.model == MODEL


async def test_end_turn_answer_becomes_text(api: FakeMessagesAPI, model: AnthropicModel) -> None:
    api.enqueue_message(text("Acme is onboarded."))

    response = await model.complete(request())

    assert response.stop_reason == "end_turn"
    assert response.content == [TextBlock(text="Acme is onboarded.")]


async def test_request_is_sent_in_the_messages_api_shape(
    api: FakeMessagesAPI, model: AnthropicModel
) -> None:
    api.enqueue_message(text("Done."))
    transcript = [
        Message(role="user", content=[TextBlock(text="Onboard Acme")]),
        Message(
            role="assistant",
            content=[
                TextBlock(text="Checking."),
                ToolUseBlock(id="toolu_01", name="lookup_vendor", input={"name": "Acme"}),
                ToolUseBlock(id="toolu_02", name="lookup_vendor", input={"name": "Acme GmbH"}),
            ],
        ),
        Message(
            role="user",
            content=[
                ToolResultBlock(tool_use_id="toolu_01", content='{"id": 7}'),
                ToolResultBlock(tool_use_id="toolu_02", content="not found", is_error=True),
            ],
        ),
    ]

    await model.complete(request(*transcript, settings=ModelSettings(cache="off")))

    (sent,) = api.requests
    assert sent.path == "/v1/messages"
    assert sent.headers["authorization"] == "Bearer test"
    body = sent.body
    assert body["model"] == MODEL
    assert body["max_tokens"] == 1024
    assert body["stream"] is True
    assert body["system"] == "Be brief."
    assert body["tools"] == [
        {
            "name": "lookup_vendor",
            "description": "Find a vendor by name.",
            "input_schema": {"type": "object", "properties": {"name": {"type": "string"}}},
        }
    ]
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "Onboard Acme"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Checking."},
                {
                    "type": "tool_use",
                    "id": "toolu_01",
                    "name": "lookup_vendor",
                    "input": {"name": "Acme"},
                },
                {
                    "type": "tool_use",
                    "id": "toolu_02",
                    "name": "lookup_vendor",
                    "input": {"name": "Acme GmbH"},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_01",
                    "content": '{"id": 7}',
                    "is_error": False,
                },
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_02",
                    "content": "not found",
                    "is_error": True,
                },
            ],
        },
    ]


async def test_empty_system_prompt_and_no_tools_are_left_out(
    api: FakeMessagesAPI, model: AnthropicModel
) -> None:
    api.enqueue_message(text("Hi."))

    await model.complete(request(system="").model_copy(update={"tools": []}))

    assert "system" not in api.requests[0].body
    assert "tools" not in api.requests[0].body


async def test_usage_and_cost_are_reported(api: FakeMessagesAPI, model: AnthropicModel) -> None:
    api.enqueue_message(
        text("Done."),
        usage={
            "input_tokens": 1000,
            "output_tokens": 500,
            "cache_creation_input_tokens": 2000,
            "cache_read_input_tokens": 10_000,
        },
    )

    response = await model.complete(request())

    assert response.usage == Usage(
        input_tokens=1000,
        output_tokens=500,
        cache_creation_input_tokens=2000,
        cache_read_input_tokens=10_000,
    )
    # $3 in, $15 out, $3.75 cache write, $0.30 cache read per million tokens
    assert response.cost_usd == pytest.approx((3000 + 7500 + 7500 + 3000) / 1_000_000)


async def test_unknown_model_costs_none_and_warns_once(
    api: FakeMessagesAPI, model: AnthropicModel, caplog: pytest.LogCaptureFixture
) -> None:
    api.enqueue_message(text("One."))
    api.enqueue_message(text("Two."))
    caplog.set_level(logging.WARNING, logger="waypoint.pricing")

    first = await model.complete(request(model="claude-unpriced-test-1"))
    second = await model.complete(request(model="claude-unpriced-test-1"))

    assert first.cost_usd is None and second.cost_usd is None
    assert first.usage.input_tokens == 10
    warnings = [r for r in caplog.records if "claude-unpriced-test-1" in r.getMessage()]
    assert len(warnings) == 1


def test_dated_model_ids_are_priced_as_their_model() -> None:
    usage = Usage(input_tokens=1_000_000, output_tokens=1_000_000)
    assert cost_usd("claude-sonnet-4-5-20250929", usage) == pytest.approx(18.0)
    assert cost_usd("claude-opus-4-1-20250805", usage) == pytest.approx(90.0)
    assert cost_usd("claude-opus-4-5", usage) == pytest.approx(30.0)
    assert cost_usd("claude-3-5-haiku-20241022", usage) == pytest.approx(4.8)
    assert cost_usd("claude-haiku-4-5-20251001", usage) == pytest.approx(6.0)


def test_a_newer_version_is_not_priced_as_an_older_one() -> None:
    assert cost_usd("claude-sonnet-5-5-pricing-test", Usage(input_tokens=1)) is None
    assert cost_usd("claude-opus-4-99", Usage(input_tokens=1)) is None


# --- Errors ---------------------------------------------------------------------------------


async def test_rate_limit_is_retried_after_the_delay_the_api_asks_for(
    api: FakeMessagesAPI, model: AnthropicModel
) -> None:
    api.enqueue_error(429, retry_after=7)

    err = await failure(model)

    assert err.type == "AnthropicAPIError"
    assert not err.non_retryable
    assert err.next_retry_delay == timedelta(seconds=7)
    assert "429" in err.message
    assert len(api.requests) == 1


async def test_retry_after_ms_is_honoured(api: FakeMessagesAPI, model: AnthropicModel) -> None:
    api.enqueue_error(529, retry_after_ms=1500)

    err = await failure(model)

    assert not err.non_retryable
    assert err.next_retry_delay == timedelta(milliseconds=1500)


@pytest.mark.parametrize("status", [400, 401, 402, 403, 404, 413, 422])
async def test_client_errors_are_not_retried(
    api: FakeMessagesAPI, model: AnthropicModel, status: int
) -> None:
    api.enqueue_error(status, retry_after=5)

    err = await failure(model)

    assert err.non_retryable
    assert err.next_retry_delay is None
    assert f"error {status}" in err.message
    assert len(api.requests) == 1


@pytest.mark.parametrize("status", [408, 409, 429, 500, 503, 529])
async def test_transient_errors_are_retried(
    api: FakeMessagesAPI, model: AnthropicModel, status: int
) -> None:
    api.enqueue_error(status)

    err = await failure(model)

    assert not err.non_retryable
    assert err.next_retry_delay is None
    assert f"error {status}" in err.message
    assert len(api.requests) == 1


async def test_bad_api_key_message_says_how_to_fix_it(
    api: FakeMessagesAPI, model: AnthropicModel
) -> None:
    api.enqueue_error(401, message="invalid x-api-key")

    err = await failure(model)

    assert err.non_retryable
    assert "ANTHROPIC_API_KEY" in err.message
    assert "invalid x-api-key" in err.message


async def test_overloaded_error_inside_a_stream_is_retried(
    api: FakeMessagesAPI, model: AnthropicModel
) -> None:
    api.enqueue_error(529, mid_stream=True)

    err = await failure(model)

    assert not err.non_retryable
    assert "error 529 (overloaded_error)" in err.message


async def test_stream_that_stalls_is_retried(api: FakeMessagesAPI) -> None:
    api.enqueue_message(text("slow answer"), event_delay=0.3)
    async with AsyncAnthropic(
        base_url=api.base_url, api_key="test", max_retries=0, timeout=0.1
    ) as client:
        err = await failure(AnthropicModel(client))

    assert err.type == "AnthropicTimeoutError"
    assert not err.non_retryable


async def test_stream_cut_short_is_retried(api: FakeMessagesAPI, model: AnthropicModel) -> None:
    api.enqueue_message(text("An answer that never ends"), cut_after=4)

    err = await failure(model)

    assert not err.non_retryable
    assert "before the message was complete" in err.message


async def test_unreachable_api_is_retried() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    async with AsyncAnthropic(base_url=f"http://127.0.0.1:{port}", api_key="test") as client:
        err = await failure(AnthropicModel(client))

    assert err.type == "AnthropicConnectionError"
    assert not err.non_retryable


@pytest.fixture
def bare_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    """A worker environment with no Anthropic credentials anywhere, not even on disk."""
    for name in (
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_AUTH_TOKEN",
        "ANTHROPIC_PROFILE",
        "ANTHROPIC_CONFIG_DIR",
        "ANTHROPIC_IDENTITY_TOKEN",
        "ANTHROPIC_IDENTITY_TOKEN_FILE",
        "ANTHROPIC_FEDERATION_RULE_ID",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    return monkeypatch


async def test_client_is_made_from_the_worker_environment(
    api: FakeMessagesAPI, bare_env: pytest.MonkeyPatch
) -> None:
    bare_env.setenv("ANTHROPIC_API_KEY", "key-from-env")
    bare_env.setenv("ANTHROPIC_BASE_URL", api.base_url)
    api.enqueue_message(text("Hi."))
    model = AnthropicModel()
    try:
        await model.complete(request())
    finally:
        await model.close()

    assert api.requests[0].headers["authorization"] == "Bearer key-from-env"
    assert "key-from-env" not in json.dumps(api.requests[0].body)


async def test_missing_api_key_is_not_retried(
    api: FakeMessagesAPI, bare_env: pytest.MonkeyPatch
) -> None:
    bare_env.setenv("ANTHROPIC_BASE_URL", api.base_url)
    model = AnthropicModel()
    try:
        err = await failure(model)
    finally:
        await model.close()

    assert err.non_retryable
    assert "ANTHROPIC_API_KEY" in err.message
    assert api.requests == []


async def test_sdk_never_retries_even_if_the_client_would(api: FakeMessagesAPI) -> None:
    api.enqueue_error(529)
    api.enqueue_message(text("second attempt"))
    async with AsyncAnthropic(base_url=api.base_url, api_key="test", max_retries=3) as client:
        model = AnthropicModel(client)
        await failure(model)
        assert len(api.requests) == 1

        response = await model.complete(request())

    assert response.content == [TextBlock(text="second attempt")]
    assert len(api.requests) == 2


# --- Inside an activity ---------------------------------------------------------------------


async def test_heartbeats_while_streaming(api: FakeMessagesAPI, model: AnthropicModel) -> None:
    api.enqueue_message(
        text("A fairly long answer, streamed in pieces."),
        tool_use("lookup_vendor", {"name": "Acme"}),
        event_delay=0.01,
    )
    heartbeats: list[tuple[Any, ...]] = []
    env = ActivityEnvironment()
    env.on_heartbeat = lambda *details: heartbeats.append(details)

    response = await env.run(model.complete, request())

    assert response.stop_reason == "tool_use"
    # message_start, ping, 2 x (block start, 3 deltas, block stop), message_delta, message_stop
    assert len(heartbeats) >= 10


async def test_fake_server_answers_non_streaming_requests(
    api: FakeMessagesAPI, client: AsyncAnthropic
) -> None:
    api.enqueue_message(tool_use("lookup_vendor", {"name": "Acme"}, id="toolu_9"))

    message = await client.messages.create(
        model=MODEL, max_tokens=10, messages=[{"role": "user", "content": "hi"}]
    )

    assert message.stop_reason == "tool_use"
    assert message.content[0].type == "tool_use"
    assert message.content[0].input == {"name": "Acme"}
    assert "stream" not in api.requests[0].body
