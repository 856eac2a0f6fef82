"""The Anthropic provider against a local server that speaks the Messages API."""

from __future__ import annotations

import base64
import importlib.util
import json
import logging
import socket
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from anthropic import AsyncAnthropic
from anthropic.lib.bedrock import AsyncAnthropicBedrock
from anthropic.lib.vertex import AsyncAnthropicVertex
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from tests.fake_messages_api import (
    FakeMessagesAPI,
    redacted_thinking,
    text,
    thinking,
    tool_use,
    tool_use_partial,
)
from waypoint._providers.claude.backends import DEFAULT_TIMEOUT
from waypoint._providers.claude.catalog import canonical_model_id, is_known, model_limits
from waypoint._providers.claude.client import build_client
from waypoint._providers.claude.provider import AnthropicModel
from waypoint._providers.claude.request import stream_params
from waypoint.errors import ModelNotConfiguredError
from waypoint.protocol import (
    DocumentBlock,
    ImageBlock,
    Message,
    ModelRequest,
    ModelSettings,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolSpec,
    ToolUseBlock,
    Usage,
)
from waypoint.settings import Settings

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
    caplog.set_level(logging.WARNING, logger="waypoint._providers.pricing")

    first = await model.complete(request(model="claude-unpriced-test-1"))
    second = await model.complete(request(model="claude-unpriced-test-1"))

    assert first.cost_usd is None and second.cost_usd is None
    assert first.usage.input_tokens == 10
    warnings = [r for r in caplog.records if "claude-unpriced-test-1" in r.getMessage()]
    assert len(warnings) == 1


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


@pytest.mark.parametrize(
    ("variable", "secret", "given"),
    [
        ("ANTHROPIC_API_KEY", "key-from-env", {}),
        ("ANTHROPIC_AUTH_TOKEN", "token-from-env", {"timeout": 30}),
    ],
    ids=["api-key", "auth-token-alone"],
)
async def test_client_is_made_from_the_worker_environment(
    api: FakeMessagesAPI,
    bare_env: pytest.MonkeyPatch,
    variable: str,
    secret: str,
    given: dict[str, float],
) -> None:
    bare_env.setenv(variable, secret)
    bare_env.setenv("ANTHROPIC_BASE_URL", api.base_url)
    api.enqueue_message(text("Hi."))
    model = AnthropicModel(**given)
    try:
        await model.complete(request())
        timeout = given.get("timeout", DEFAULT_TIMEOUT)
        assert model.client.timeout == timeout and model.client.max_retries == 0
    finally:
        await model.close()

    assert api.requests[0].headers["authorization"] == f"Bearer {secret}"
    assert secret not in json.dumps(api.requests[0].body)


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


# --- Thinking, rich content -----------------------------------------------------------------

THOUGHT = 'Acme first; "quotes", a tab\t, unicode \u2713 and a trailing newline\n'


async def test_thinking_blocks_come_back_verbatim_and_are_resent_byte_for_byte(
    api: FakeMessagesAPI, model: AnthropicModel
) -> None:
    # The server checks what comes back against what it issued: one changed byte is a 400.
    signature = api.sign(THOUGHT)
    redacted = api.signer.redacted()
    api.enqueue_message(
        thinking(THOUGHT),
        redacted_thinking(redacted),
        tool_use("lookup_vendor", {"name": "Acme"}, id="toolu_1"),
    )
    api.enqueue_message(text("Acme is vendor 7."))
    settings = ModelSettings(thinking="adaptive")
    task = Message(role="user", content=[TextBlock(text="Onboard Acme")])

    first = await model.complete(request(task, settings=settings))

    assert first.content == [
        ThinkingBlock(thinking=THOUGHT, signature=signature),
        RedactedThinkingBlock(data=redacted),
        ToolUseBlock(id="toolu_1", name="lookup_vendor", input={"name": "Acme"}),
    ]
    reply = Message(role="assistant", content=first.content)
    result = Message(role="user", content=[ToolResultBlock(tool_use_id="toolu_1", content="7")])
    await model.complete(request(task, reply, result, settings=settings))

    sent = api.requests[1].body["messages"][1]["content"]
    assert sent[0] == {"type": "thinking", "thinking": THOUGHT, "signature": signature}
    assert sent[1] == {"type": "redacted_thinking", "data": redacted}
    assert api.requests[1].body["thinking"] == {"type": "adaptive"}


async def test_tool_results_with_images_and_documents_reach_the_model(
    api: FakeMessagesAPI, model: AnthropicModel
) -> None:
    api.enqueue_message(text("Seen."))
    notes = base64.b64encode("Plain notes \u2713".encode()).decode()
    transcript = [
        Message(
            role="user",
            content=[TextBlock(text="Check"), ImageBlock(media_type="image/png", data="iVBORw0=")],
        ),
        Message(
            role="assistant",
            content=[
                ToolUseBlock(
                    id="toolu_1", name="lookup_vendor", input={}, invalid="cut off at max_tokens"
                )
            ],
        ),
        Message(
            role="user",
            content=[
                ToolResultBlock(
                    tool_use_id="toolu_1",
                    content=[
                        TextBlock(text="Scan attached."),
                        DocumentBlock(data="JVBERi0=", title="contract.pdf"),
                        DocumentBlock(media_type="text/plain", data=notes),
                    ],
                )
            ],
        ),
    ]

    await model.complete(request(*transcript, settings=ModelSettings(cache="off")))

    messages = api.requests[0].body["messages"]
    assert messages[0]["content"][1] == {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0="},
    }
    assert messages[1]["content"] == [
        {"type": "tool_use", "id": "toolu_1", "name": "lookup_vendor", "input": {}}
    ]  # `invalid` is ours, never sent
    assert messages[2]["content"][0]["content"] == [
        {"type": "text", "text": "Scan attached."},
        {
            "type": "document",
            "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0="},
            "title": "contract.pdf",
        },
        {
            "type": "document",
            "source": {"type": "text", "media_type": "text/plain", "data": "Plain notes \u2713"},
        },
    ]


# --- Prompt caching -------------------------------------------------------------------------


def loop_transcript(signature: str = "sig") -> list[Message]:
    """Task, a thinking reply with a call, its result: the shape of every loop turn.

    A server is sent only a `signature` it issued: `api.sign("hm")`.
    """
    return [
        Message(role="user", content=[TextBlock(text="Onboard Acme")]),
        Message(
            role="assistant",
            content=[
                ThinkingBlock(thinking="hm", signature=signature),
                ToolUseBlock(id="toolu_1", name="lookup_vendor", input={"name": "Acme"}),
            ],
        ),
        Message(role="user", content=[ToolResultBlock(tool_use_id="toolu_1", content="7")]),
    ]


def breakpoints(body: dict[str, Any]) -> list[tuple[str, Any]]:
    """Where the request body carries cache_control, and with what."""
    found: list[tuple[str, Any]] = []
    for i, tool in enumerate(body.get("tools", [])):
        if "cache_control" in tool:
            found.append((f"tools[{i}]", tool["cache_control"]))
    system = body.get("system")
    if isinstance(system, list):
        for i, block in enumerate(system):
            if "cache_control" in block:
                found.append((f"system[{i}]", block["cache_control"]))
    for m, message in enumerate(body["messages"]):
        for b, block in enumerate(message["content"]):
            if "cache_control" in block:
                found.append((f"messages[{m}][{b}]", block["cache_control"]))
    return found


@pytest.mark.parametrize(
    ("cache", "control"),
    [("5m", {"type": "ephemeral"}), ("1h", {"type": "ephemeral", "ttl": "1h"})],
)
async def test_cache_breakpoints_sit_on_tools_system_and_the_newest_messages(
    api: FakeMessagesAPI, model: AnthropicModel, cache: str, control: dict[str, str]
) -> None:
    api.enqueue_message(text("Done."))
    settings = ModelSettings(cache=cache)  # type: ignore[arg-type]

    await model.complete(request(*loop_transcript(api.sign("hm")), settings=settings))

    body = api.requests[0].body
    assert body["system"] == [{"type": "text", "text": "Be brief.", "cache_control": control}]
    assert breakpoints(body) == [
        ("tools[0]", control),
        ("system[0]", control),
        ("messages[0][0]", control),  # newest one call ago: read back what it wrote
        ("messages[2][0]", control),  # newest now
    ]


async def test_caching_off_sends_no_breakpoint(api: FakeMessagesAPI, model: AnthropicModel) -> None:
    api.enqueue_message(text("Done."))

    transcript = loop_transcript(api.sign("hm"))
    await model.complete(request(*transcript, settings=ModelSettings(cache="off")))

    assert breakpoints(api.requests[0].body) == []
    assert api.requests[0].body["system"] == "Be brief."


def test_a_breakpoint_is_never_put_on_thinking() -> None:
    newest = Message(
        role="assistant",
        content=[
            TextBlock(text="Checking."),
            ThinkingBlock(thinking="hm", signature="sig"),
            RedactedThinkingBlock(data="xyz"),
        ],
    )
    params = stream_params(request(*loop_transcript(), newest))

    last = params["messages"][-1]["content"]
    assert last[0]["cache_control"] == {"type": "ephemeral"}
    assert "cache_control" not in last[1] and "cache_control" not in last[2]
    assert len(breakpoints(params)) <= 4


async def test_cache_writes_of_one_hour_are_counted_apart(
    api: FakeMessagesAPI, model: AnthropicModel
) -> None:
    api.enqueue_message(
        text("Done."),
        usage={
            "input_tokens": 50,
            "output_tokens": 5,
            "cache_creation_input_tokens": 3000,
            "cache_creation": {
                "ephemeral_5m_input_tokens": 1000,
                "ephemeral_1h_input_tokens": 2000,
            },
            "cache_read_input_tokens": 9000,
        },  # type: ignore[dict-item]
    )

    response = await model.complete(request(settings=ModelSettings(cache="1h")))

    assert response.usage == Usage(
        input_tokens=50,
        output_tokens=5,
        cache_creation_input_tokens=3000,
        cache_creation_1h_input_tokens=2000,
        cache_read_input_tokens=9000,
    )


# --- Tool choice, thinking and effort settings ----------------------------------------------


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        (ModelSettings(), {}),
        (
            ModelSettings(parallel_tool_calls=False),
            {"tool_choice": {"type": "auto", "disable_parallel_tool_use": True}},
        ),
        (
            ModelSettings(tool_choice="any", parallel_tool_calls=False),
            {"tool_choice": {"type": "any", "disable_parallel_tool_use": True}},
        ),
        (
            ModelSettings(tool_choice="lookup_vendor"),
            {"tool_choice": {"type": "tool", "name": "lookup_vendor"}},
        ),
        (
            ModelSettings(tool_choice="none", parallel_tool_calls=False),
            {"tool_choice": {"type": "none"}},
        ),
        (
            ModelSettings(thinking="adaptive", effort="high"),
            {"thinking": {"type": "adaptive"}, "output_config": {"effort": "high"}},
        ),
        (
            ModelSettings(thinking="enabled", thinking_budget=2048),
            {"thinking": {"type": "enabled", "budget_tokens": 2048}},
        ),
        (  # a budget at or above max_tokens is shrunk below it, as the API requires
            ModelSettings(thinking="enabled", thinking_budget=8000),
            {"thinking": {"type": "enabled", "budget_tokens": 4095}},
        ),
        (ModelSettings(effort="low"), {"output_config": {"effort": "low"}}),
    ],
)
async def test_agent_settings_reach_the_request_body(
    api: FakeMessagesAPI, model: AnthropicModel, settings: ModelSettings, expected: dict[str, Any]
) -> None:
    api.enqueue_message(text("Done."))

    await model.complete(request(settings=settings, max_tokens=4096))

    body = api.requests[0].body
    keys = ("tool_choice", "thinking", "output_config")
    assert {k: body[k] for k in keys if k in body} == expected


# --- Stop reasons and tool calls that must not run ------------------------------------------


async def test_tool_call_cut_off_at_max_tokens_is_marked_invalid(
    api: FakeMessagesAPI, model: AnthropicModel
) -> None:
    api.enqueue_message(
        text("Paying both."),
        tool_use("lookup_vendor", {"name": "Acme"}, id="toolu_1"),
        tool_use_partial("pay", '{"payee": "ada", "amount": 12', id="toolu_2"),
        stop_reason="max_tokens",
    )

    response = await model.complete(request())

    assert response.stop_reason == "max_tokens"
    first, cut = response.content[1], response.content[2]
    assert isinstance(first, ToolUseBlock) and first.invalid is None
    assert isinstance(cut, ToolUseBlock) and cut.id == "toolu_2"
    assert cut.input == {"payee": "ada", "amount": 12}  # the SDK's lenient parse
    assert cut.invalid == "cut off at max_tokens"


@pytest.mark.parametrize("raw", ["[1, 2]", '["Acme"]', "42"])
async def test_tool_input_that_is_not_an_object_is_marked_invalid(
    api: FakeMessagesAPI, model: AnthropicModel, raw: str
) -> None:
    # Complete JSON, just not an object: streamed as is, and not cut off.
    api.enqueue_message(
        tool_use_partial("lookup_vendor", raw, id="toolu_1"), stop_reason="tool_use"
    )

    response = await model.complete(request())

    (call,) = response.content
    assert isinstance(call, ToolUseBlock)
    assert call.input == {}
    assert call.invalid is not None and call.invalid.startswith("tool input was not a JSON object")


async def test_refusal_carries_the_apis_stop_details(
    api: FakeMessagesAPI, model: AnthropicModel
) -> None:
    api.enqueue_message(
        text("I can't help with that."),
        stop_reason="refusal",
        stop_details={"type": "refusal", "category": "cyber", "explanation": "Looks like malware."},
    )

    response = await model.complete(request())

    assert response.stop_reason == "refusal"
    assert response.stop_details == "cyber: Looks like malware."


async def test_stop_sequence_is_recorded(api: FakeMessagesAPI, model: AnthropicModel) -> None:
    api.enqueue_message(text("Vendor: Acme"), stop_reason="stop_sequence", stop_sequence="</done>")

    response = await model.complete(request())

    assert (response.stop_reason, response.stop_sequence) == ("stop_sequence", "</done>")
    assert response.stop_details == ""


@pytest.mark.parametrize("reason", ["model_context_window_exceeded", "pause_turn", "max_tokens"])
async def test_other_stop_reasons_are_answers_not_errors(
    api: FakeMessagesAPI, model: AnthropicModel, reason: str
) -> None:
    api.enqueue_message(text("Partial"), stop_reason=reason)

    response = await model.complete(request())

    assert response.stop_reason == reason
    assert response.content == [TextBlock(text="Partial")]


# --- Context overflow and unknown models ----------------------------------------------------


@pytest.mark.parametrize(
    "message",
    [
        "prompt is too long: 215000 tokens > 200000 maximum",
        "input length and `max_tokens` exceed context limit: 198000 + 8192 > 200000, "
        "decrease input length or `max_tokens` and try again",
        "The request input exceeds the model's context window.",
    ],
)
@pytest.mark.parametrize("mid_stream", [False, True])
async def test_prompt_too_long_is_a_context_window_error(
    api: FakeMessagesAPI, model: AnthropicModel, message: str, mid_stream: bool
) -> None:
    api.enqueue_error(400, message=message, mid_stream=mid_stream)

    err = await failure(model)

    assert err.type == "ContextWindowExceeded"
    assert err.non_retryable
    assert message in err.message


async def test_other_400s_are_invalid_requests_not_context_window_errors(
    api: FakeMessagesAPI, model: AnthropicModel
) -> None:
    api.enqueue_error(400, message="messages.1: tool_use ids must be unique")

    err = await failure(model)

    assert err.type == "InvalidRequest" and err.non_retryable
    assert "400 (invalid_request_error): messages.1: tool_use ids must be unique" in err.message


async def test_unknown_model_404_names_the_model(
    api: FakeMessagesAPI, model: AnthropicModel
) -> None:
    api.enqueue_error(404)

    err = await failure(model, request(model="claude-nope-9"))

    assert err.non_retryable
    assert "'claude-nope-9'" in err.message


async def test_check_model_tells_an_unknown_id_from_a_known_one() -> None:
    with FakeMessagesAPI(models={MODEL}) as api:
        async with AsyncAnthropic(base_url=api.base_url, api_key="t", max_retries=0) as client:
            model = AnthropicModel(client)
            assert await model.check_model(MODEL) is None
            problem = await model.check_model("claude-nope-9")

    assert problem is not None and "unknown model id 'claude-nope-9'" in problem
    assert [r.path for r in api.requests] == [f"/v1/models/{MODEL}", "/v1/models/claude-nope-9"]


async def test_check_model_does_not_block_when_it_cannot_tell() -> None:
    with FakeMessagesAPI(models=()) as api:  # no model exists: only the errors save the run
        api.enqueue_error(529, lookup=True)
        api.enqueue_error(401, lookup=True)
        async with AsyncAnthropic(base_url=api.base_url, api_key="t", max_retries=0) as client:
            model = AnthropicModel(client)
            assert await model.check_model(MODEL) is None
            assert await model.check_model(MODEL) is None
            assert await model.check_model(MODEL) is not None  # the script is spent: a 404

    assert [r.path for r in api.requests] == [f"/v1/models/{MODEL}"] * 3


# --- Ways to reach Claude -------------------------------------------------------------------


async def test_vertex_client_streams_from_the_vertex_route(api: FakeMessagesAPI) -> None:
    api.enqueue_message(text("Hi from Vertex."))
    client = AsyncAnthropicVertex(
        region="us-east5",
        project_id="acme-proj",
        access_token="fake-gcp-token",
        base_url=api.base_url,
    )
    async with client:
        claude = AnthropicModel(client)
        response = await claude.complete(request())
        assert await claude.check_model(MODEL) is None  # no models API on Vertex: not asked

    (sent,) = api.requests
    assert sent.path == (
        f"/projects/acme-proj/locations/us-east5/publishers/anthropic/models/{MODEL}"
        ":streamRawPredict"
    )
    assert sent.headers["authorization"] == "Bearer fake-gcp-token"
    assert "model" not in sent.body and sent.body["anthropic_version"]
    assert response.content == [TextBlock(text="Hi from Vertex.")]
    assert response.model == MODEL


async def test_vertex_without_a_project_is_not_retried(
    api: FakeMessagesAPI, bare_env: pytest.MonkeyPatch
) -> None:
    bare_env.delenv("ANTHROPIC_VERTEX_PROJECT_ID", raising=False)
    client = AsyncAnthropicVertex(region="us-east5", access_token="t", base_url=api.base_url)
    async with client:
        err = await failure(AnthropicModel(client))

    assert err.type == "AnthropicAuthError" and err.non_retryable
    assert "ANTHROPIC_VERTEX_PROJECT_ID" in err.message
    assert api.requests == []


async def test_bedrock_client_is_handed_in_with_retries_off() -> None:
    # Construction only: the fake server does not speak AWS's event-stream framing.
    client = AsyncAnthropicBedrock(
        aws_region="eu-west-1", aws_access_key="AKIDEXAMPLE", aws_secret_key="secret"
    )
    claude = AnthropicModel(client)

    assert isinstance(claude.client, AsyncAnthropicBedrock)
    assert claude.client.max_retries == 0
    assert str(claude.client.base_url).startswith("https://bedrock-runtime.eu-west-1.amazonaws.com")
    assert await claude.check_model("anthropic.claude-sonnet-4-5-20250929-v1:0") is None
    await client.close()


@pytest.mark.parametrize(
    ("backend", "module"), [("bedrock", "botocore"), ("vertex", "google.auth")]
)
async def test_cloud_backends_are_built_or_name_their_missing_extra(
    bare_env: pytest.MonkeyPatch, backend: str, module: str
) -> None:
    bare_env.setenv("AWS_REGION", "us-east-1")
    bare_env.setenv("CLOUD_ML_REGION", "us-east5")
    bare_env.setenv("ANTHROPIC_VERTEX_PROJECT_ID", "acme-proj")
    try:
        installed = importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        installed = False

    if not installed:
        with pytest.raises(ModelNotConfiguredError, match=rf"waypoint-agents\[{backend}\]"):
            AnthropicModel(backend=backend)
        return
    async with build_client(backend, timeout=42) as client:
        assert client.max_retries == 0 and client.timeout == 42


def test_unknown_backend_is_refused() -> None:
    with pytest.raises(ModelNotConfiguredError, match="azure"):
        AnthropicModel(backend="azure")


@pytest.mark.parametrize(
    ("env", "backend", "use_anthropic", "timeout"),
    [
        ({}, "anthropic", False, 600.0),
        ({"ANTHROPIC_API_KEY": "k"}, "anthropic", True, 600.0),
        ({"ANTHROPIC_AUTH_TOKEN": "t", "WAYPOINT_MODEL_TIMEOUT": "90"}, "anthropic", True, 90.0),
        ({"WAYPOINT_CLAUDE": "bedrock"}, "bedrock", True, 600.0),
        ({"WAYPOINT_CLAUDE": "Vertex"}, "vertex", True, 600.0),
    ],
)
def test_settings_pick_the_way_to_claude(
    bare_env: pytest.MonkeyPatch,
    env: dict[str, str],
    backend: str,
    use_anthropic: bool,
    timeout: float,
) -> None:
    for name in ("WAYPOINT_CLAUDE", "WAYPOINT_MODEL_TIMEOUT"):
        bare_env.delenv(name, raising=False)
    for name, value in env.items():
        bare_env.setenv(name, value)

    settings = Settings.from_env()

    assert (settings.claude_backend, settings.use_anthropic) == (backend, use_anthropic)
    assert settings.model_timeout == timeout


def test_settings_refuse_an_unknown_backend(bare_env: pytest.MonkeyPatch) -> None:
    bare_env.setenv("WAYPOINT_CLAUDE", "azure")
    with pytest.raises(ModelNotConfiguredError, match="WAYPOINT_CLAUDE"):
        Settings.from_env()


# --- The model catalog ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "canonical"),
    [
        ("claude-sonnet-4-5-20250929", "claude-sonnet-4-5"),
        ("claude-sonnet-4-5@20250929", "claude-sonnet-4-5"),
        ("anthropic.claude-sonnet-4-5-20250929-v1:0", "claude-sonnet-4-5"),
        ("us.anthropic.claude-sonnet-4-5-20250929-v1:0", "claude-sonnet-4-5"),
        ("eu.anthropic.claude-haiku-4-5-20251001-v1:0", "claude-haiku-4-5"),
        ("global.anthropic.claude-opus-4-8-v1", "claude-opus-4-8"),
        (
            "arn:aws:bedrock:us-east-1:123456789012:inference-profile/"
            "us.anthropic.claude-opus-4-1-20250805-v1:0",
            "claude-opus-4-1",
        ),
        ("claude-3-5-haiku-latest", "claude-3-5-haiku"),
        ("claude-opus-4-6", "claude-opus-4-6"),
        ("claude-sonnet-5-5", "claude-sonnet-5-5"),  # a version is never stripped
    ],
)
def test_every_spelling_of_a_model_maps_to_one_id(model: str, canonical: str) -> None:
    assert canonical_model_id(model) == canonical


def test_catalog_knows_context_windows_and_output_budgets() -> None:
    assert model_limits("us.anthropic.claude-sonnet-4-5-20250929-v1:0") == (200_000, 64_000)
    assert model_limits("claude-opus-4-8") == (1_000_000, 128_000)
    assert model_limits("claude-haiku-4-5@20251001") == (200_000, 64_000)
    assert model_limits("claude-opus-4-1-20250805") == (200_000, 32_000)
    assert is_known("anthropic.claude-opus-4-6-v1")


def test_unknown_models_get_conservative_limits() -> None:
    assert not is_known("claude-opus-9")
    assert model_limits("claude-opus-9") == (200_000, 32_000)
