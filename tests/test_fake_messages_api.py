"""The fake Messages API against the real `anthropic` client: it must not drift from the API.

Each behaviour Waypoint's Claude tests rely on is pinned here, through the SDK's own parsing
(streamed and not), so a fake that stopped telling the truth fails here first.
"""

from __future__ import annotations

import asyncio
import json
import math
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anthropic
import pytest
from anthropic import AsyncAnthropic
from anthropic.lib.vertex import AsyncAnthropicVertex
from anthropic.types import MessageParam

from tests.fake_messages_api import (
    FakeMessagesAPI,
    redacted_thinking,
    reply,
    text,
    thinking,
    tool_use,
    tool_use_partial,
)
from tests.fake_messages_api.prompt import MEDIA_TOKENS, estimate_tokens

MODEL = "claude-sonnet-4-6"
BIG = "Policy. " * 800  # 6,400 characters: about 1,600 tokens, above the cacheable minimum
TOOL = {"name": "pay", "description": "Pay someone.", "input_schema": {"type": "object"}}
ENABLED = {"type": "enabled", "budget_tokens": 2048}


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def api(clock: Clock) -> Iterator[FakeMessagesAPI]:
    with FakeMessagesAPI(count_tokens=True, clock=clock) as api:
        yield api


@pytest.fixture
async def client(api: FakeMessagesAPI) -> AsyncIterator[AsyncAnthropic]:
    async with AsyncAnthropic(base_url=api.base_url, api_key="test", max_retries=0) as client:
        yield client


async def stream(client: AsyncAnthropic, **params: Any) -> tuple[list[Any], Any]:
    """Every event of a streamed call, and the final message the SDK built from them."""
    params = {"model": MODEL, "max_tokens": 4096, **params}
    async with client.messages.stream(**params) as s:
        events = [event async for event in s]
        return events, await s.get_final_message()


def user(value: str) -> dict[str, Any]:
    return {"role": "user", "content": value}


def tool_turn(assistant: list[dict[str, Any]], call_id: str) -> list[dict[str, Any]]:
    """A task, the assistant's tool call and its result: the shape of turn 2."""
    return [
        user("Pay ada 1200."),
        {"role": "assistant", "content": assistant},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": call_id, "content": "ok"}],
        },
    ]


def cached_system(ttl: str | None = None) -> list[dict[str, Any]]:
    control: dict[str, Any] = {"type": "ephemeral", **({"ttl": ttl} if ttl else {})}
    return [{"type": "text", "text": BIG, "cache_control": control}]


def hi() -> list[MessageParam]:
    """A one-line conversation, typed for the SDK's `create`."""
    return [{"role": "user", "content": "Hi."}]


def first_text(message: Any) -> str:
    """The text of a reply's first block (the SDK types it as any kind of block)."""
    return message.content[0].text


def tokens(*parts: Any) -> int:
    return sum(estimate_tokens(p) for p in parts)


# --- Thinking -------------------------------------------------------------------------------


async def test_thinking_streams_as_thinking_and_signature_deltas(
    api: FakeMessagesAPI, client: AsyncAnthropic
) -> None:
    api.enqueue_message(
        thinking("The payee is ada."), redacted_thinking(), tool_use("pay", {"amount": 1200})
    )

    events, message = await stream(client, thinking=ENABLED, messages=[user("Pay ada.")])

    deltas = [e.delta.type for e in events if e.type == "content_block_delta"]
    assert deltas.count("thinking_delta") >= 2 and deltas.count("signature_delta") == 1
    assert deltas.index("signature_delta") > max(
        i for i, d in enumerate(deltas) if d == "thinking_delta"
    )
    first, second, call = message.content
    assert first.type == "thinking" and first.thinking == "The payee is ada."
    assert first.signature == api.sign("The payee is ada.")
    assert second.type == "redacted_thinking" and second.data
    assert call.type == "tool_use" and message.stop_reason == "tool_use"


async def test_tool_turn_without_its_thinking_block_is_a_400_that_takes_no_answer(
    api: FakeMessagesAPI, client: AsyncAnthropic
) -> None:
    api.enqueue_message(text("Paid."))
    turn = tool_turn([tool_use("pay", {"amount": 1200}, id="toolu_1")], "toolu_1")

    for config in (ENABLED, {"type": "adaptive"}):
        with pytest.raises(anthropic.BadRequestError) as raised:
            await stream(client, thinking=config, messages=turn)
        assert raised.value.status_code == 400
        assert raised.value.type == "invalid_request_error"
        assert raised.value.api_message.startswith(  # type: ignore[attr-defined]
            "messages.1.content.0.type: Expected `thinking` or `redacted_thinking`, "
            "but found `tool_use`."
        )

    _, message = await stream(client, messages=turn)  # thinking off: no such rule
    assert message.content[0].text == "Paid."


async def test_thinking_blocks_sent_back_verbatim_are_accepted(
    api: FakeMessagesAPI, client: AsyncAnthropic
) -> None:
    api.enqueue_message(thinking("Pay 1200."), redacted_thinking(), tool_use("pay", {"a": 1}))
    api.enqueue_message(text("Paid."))
    _, first = await stream(client, thinking=ENABLED, messages=[user("Pay ada.")])
    sent_back = [block.to_dict() for block in first.content]

    _, second = await stream(
        client, thinking=ENABLED, messages=tool_turn(sent_back, first.content[2].id)
    )

    assert second.content[0].text == "Paid."


async def test_a_tool_loop_is_one_turn_that_only_its_first_reply_opens_with_thinking(
    api: FakeMessagesAPI, client: AsyncAnthropic
) -> None:
    """Anthropic's "Toggling thinking modes": tool use loops are part of the assistant turn.

    Without interleaved thinking Claude writes no thinking after a tool result, so a second
    call in the loop comes without any; the API takes it back. A user message that answers no
    tool call (a summary) starts a new turn, whose first reply must open with thinking.
    """
    api.enqueue_message(thinking("Pay twice."), tool_use("pay", {"a": 1}, id="toolu_1"))
    api.enqueue_message(text("Now the second."), tool_use("pay", {"a": 2}, id="toolu_2"))
    api.enqueue_message(text("Paid both."))
    _, first = await stream(client, thinking=ENABLED, messages=[user("Pay ada twice.")])
    loop = tool_turn([b.to_dict() for b in first.content], "toolu_1")
    _, second = await stream(client, thinking=ENABLED, messages=loop)
    assert second.content[0].type == "text"  # no thinking of its own
    result = [{"type": "tool_result", "tool_use_id": "toolu_2", "content": "ok"}]
    loop += [
        {"role": "assistant", "content": [b.to_dict() for b in second.content]},
        {"role": "user", "content": result},
    ]

    _, third = await stream(client, thinking=ENABLED, messages=loop)
    assert third.content[0].text == "Paid both."

    compacted = [user("Pay ada twice. [Summary: the first is paid.]"), *loop[3:]]
    with pytest.raises(anthropic.BadRequestError) as raised:
        await stream(client, thinking=ENABLED, messages=compacted)
    assert raised.value.api_message.startswith(  # type: ignore[attr-defined]
        "messages.1.content.0.type: Expected `thinking` or `redacted_thinking`, but found `text`."
    )


@pytest.mark.parametrize(
    "tamper, message",
    [
        (lambda b: {**b, "signature": b["signature"][:-4] + "AAAA"}, "Invalid `signature`"),
        (lambda b: {**b, "thinking": b["thinking"] + " "}, "Invalid `signature`"),
    ],
)
async def test_an_altered_thinking_block_is_rejected(
    api: FakeMessagesAPI, client: AsyncAnthropic, tamper: Any, message: str
) -> None:
    api.enqueue_message(thinking("Pay 1200."), tool_use("pay", {"a": 1}, id="toolu_1"))
    _, first = await stream(client, thinking=ENABLED, messages=[user("Pay ada.")])
    blocks = [block.to_dict() for block in first.content]

    with pytest.raises(anthropic.BadRequestError) as raised:
        await stream(
            client, thinking=ENABLED, messages=tool_turn([tamper(blocks[0]), blocks[1]], "toolu_1")
        )
    assert raised.value.api_message == (  # type: ignore[attr-defined]
        f"messages.1.content.0: {message} in `thinking` block"
    )


async def test_redacted_thinking_data_not_issued_here_is_rejected(
    api: FakeMessagesAPI, client: AsyncAnthropic
) -> None:
    assistant = [redacted_thinking("Zm9yZ2Vk"), tool_use("pay", {"a": 1}, id="toolu_1")]
    with pytest.raises(anthropic.BadRequestError, match="Invalid `data`"):
        await stream(client, thinking=ENABLED, messages=tool_turn(assistant, "toolu_1"))


async def test_thinking_budget_must_fit_under_max_tokens(client: AsyncAnthropic) -> None:
    with pytest.raises(anthropic.BadRequestError, match="must be greater than"):
        await stream(client, max_tokens=2048, thinking=ENABLED, messages=[user("hi")])


# --- Prompt caching -------------------------------------------------------------------------


async def test_first_call_writes_the_prefix_and_the_second_reads_it(
    api: FakeMessagesAPI, client: AsyncAnthropic
) -> None:
    api.enqueue_message(text("One."))
    api.enqueue_message(text("Two."))
    prefix = tokens({"type": "text", "text": BIG})
    tail = tokens({"type": "text", "text": "Hi."})

    _, first = await stream(client, system=cached_system(), messages=[user("Hi.")])
    _, second = await stream(client, system=cached_system(), messages=[user("Hi.")])

    assert first.usage.cache_creation_input_tokens == prefix
    assert first.usage.cache_creation.ephemeral_5m_input_tokens == prefix
    assert first.usage.cache_creation.ephemeral_1h_input_tokens == 0
    assert (first.usage.input_tokens, first.usage.cache_read_input_tokens) == (tail, 0)
    assert second.usage.cache_read_input_tokens == prefix
    assert second.usage.cache_creation_input_tokens == 0
    assert second.usage.input_tokens == tail
    assert second.usage.output_tokens == tokens(text("Two."))
    assert [u["cache_read_input_tokens"] for u in api.usages] == [0, prefix]


async def test_five_minute_entries_expire_and_reads_refresh_them(
    api: FakeMessagesAPI, client: AsyncAnthropic, clock: Clock
) -> None:
    for _ in range(4):
        api.enqueue_message(text("ok"))
    calls = [("write", 0), ("read", 200), ("read", 200), ("write", 301)]
    for expected, wait in calls:
        clock.now += wait
        _, message = await stream(client, system=cached_system(), messages=[user("Hi.")])
        wrote = message.usage.cache_creation_input_tokens > 0
        assert ("write" if wrote else "read") == expected, (expected, wait)


async def test_one_hour_entries_outlive_five_minutes_and_are_counted_apart(
    api: FakeMessagesAPI, client: AsyncAnthropic, clock: Clock
) -> None:
    for _ in range(3):
        api.enqueue_message(text("ok"))
    prefix = tokens({"type": "text", "text": BIG})

    _, first = await stream(client, system=cached_system("1h"), messages=[user("Hi.")])
    clock.now += 3000
    _, second = await stream(client, system=cached_system("1h"), messages=[user("Hi.")])
    clock.now += 3601
    _, third = await stream(client, system=cached_system("1h"), messages=[user("Hi.")])

    assert first.usage.cache_creation.ephemeral_1h_input_tokens == prefix
    assert first.usage.cache_creation.ephemeral_5m_input_tokens == 0
    assert second.usage.cache_read_input_tokens == prefix
    assert third.usage.cache_creation.ephemeral_1h_input_tokens == prefix


async def test_a_prefix_below_the_minimum_is_not_cached(
    api: FakeMessagesAPI, client: AsyncAnthropic
) -> None:
    api.enqueue_message(text("ok"))
    api.enqueue_message(text("ok"))
    small = [{"type": "text", "text": "Short.", "cache_control": {"type": "ephemeral"}}]

    for _ in range(2):
        _, message = await stream(client, system=small, messages=[user("Hi.")])
        assert message.usage.cache_creation_input_tokens == 0
        assert message.usage.cache_read_input_tokens == 0
        assert message.usage.input_tokens == tokens(text("Short."), text("Hi."))


async def test_another_model_or_a_changed_byte_before_the_marker_misses(
    api: FakeMessagesAPI, client: AsyncAnthropic
) -> None:
    for _ in range(4):
        api.enqueue_message(text("ok"))
    await stream(client, system=cached_system(), messages=[user("Hi.")])
    _, other_model = await stream(
        client, model="claude-opus-4-7", system=cached_system(), messages=[user("Hi.")]
    )
    _, with_tool = await stream(
        client, tools=[TOOL], system=cached_system(), messages=[user("Hi.")]
    )
    _, other_tail = await stream(client, system=cached_system(), messages=[user("Other.")])

    assert other_model.usage.cache_read_input_tokens == 0
    assert with_tool.usage.cache_read_input_tokens == 0  # tools render before the system prompt
    assert other_tail.usage.cache_read_input_tokens > 0  # only the part after the marker changed


async def test_a_growing_transcript_reads_last_turns_prefix_and_writes_only_the_new_turn(
    api: FakeMessagesAPI, client: AsyncAnthropic
) -> None:
    """The breakpoint moves to the newest message; the API finds the old one by looking back."""
    page = "x" * 12_000
    messages: list[dict[str, Any]] = [user("Read every page.")]
    seen: list[Any] = []
    added: list[int] = []
    for turn in range(3):
        api.enqueue_message(tool_use("read", {"page": turn}, id=f"toolu_{turn}"))
        marked = [dict(m) for m in messages]
        last = marked[-1]
        content = last["content"]
        blocks = [text(content)] if isinstance(content, str) else [dict(b) for b in content]
        blocks[-1]["cache_control"] = {"type": "ephemeral"}
        marked[-1] = {**last, "content": blocks}
        _, message = await stream(client, system=BIG, messages=marked)
        seen.append(message.usage)
        call = [b.to_dict() for b in message.content]
        result = {"type": "tool_result", "tool_use_id": f"toolu_{turn}", "content": page}
        messages += [{"role": "assistant", "content": call}, {"role": "user", "content": [result]}]
        added.append(tokens(*call, result))

    assert seen[0].cache_read_input_tokens == 0 and seen[0].input_tokens == 0
    for turn in (1, 2):
        before, after = seen[turn - 1], seen[turn]
        prefix_before = before.cache_read_input_tokens + before.cache_creation_input_tokens
        assert after.cache_read_input_tokens == prefix_before
        assert after.cache_creation_input_tokens == added[turn - 1]
        assert after.input_tokens == 0


async def test_cache_marker_rules_are_the_apis(client: AsyncAnthropic) -> None:
    marked = [
        {"type": "text", "text": f"part {i}", "cache_control": {"type": "ephemeral"}}
        for i in range(5)
    ]
    with pytest.raises(anthropic.BadRequestError, match="A maximum of 4 blocks"):
        await stream(client, system=marked, messages=[user("Hi.")])
    out_of_order = [*cached_system("5m"), *cached_system("1h")]
    with pytest.raises(anthropic.BadRequestError, match="must not come after"):
        await stream(client, system=out_of_order, messages=[user("Hi.")])


async def test_auto_answer_runs_a_loop_with_no_script_and_counts_usage(
    api: FakeMessagesAPI, client: AsyncAnthropic
) -> None:
    def answer(body: dict[str, Any]) -> Any:
        turns = len(body["messages"]) // 2
        if turns < 3:
            return [tool_use("read", {"page": turns}, id=f"toolu_{turns}")]
        return reply(text("Read them all."))

    api.auto_answer = answer
    messages: list[dict[str, Any]] = [user("Read.")]
    while True:
        message = await client.messages.create(model=MODEL, max_tokens=100, messages=messages)
        if message.stop_reason != "tool_use":
            break
        messages.append({"role": "assistant", "content": [b.to_dict() for b in message.content]})
        result = {"type": "tool_result", "tool_use_id": message.content[0].id, "content": "p"}
        messages.append({"role": "user", "content": [result]})

    assert message.content[0].text == "Read them all."
    assert len(api.message_requests) == 4 and len(api.usages) == 4
    assert [u["input_tokens"] for u in api.usages] == sorted(u["input_tokens"] for u in api.usages)


async def test_count_tokens_uses_the_same_estimate(client: AsyncAnthropic) -> None:
    counted = await client.messages.count_tokens(
        model=MODEL, system="Be brief.", messages=[user("Hi.")]
    )
    assert counted.input_tokens == tokens(text("Be brief."), text("Hi."))
    assert tokens("x" * 10) == math.ceil(len(json.dumps("x" * 10)) / 4)


# --- Stop reasons ---------------------------------------------------------------------------


async def test_a_tool_call_cut_off_at_max_tokens_streams_its_partial_json_and_closes(
    api: FakeMessagesAPI, client: AsyncAnthropic
) -> None:
    cut = '{"payee": "ada", "amount": 12'
    api.enqueue_message(text("Paying."), tool_use_partial("pay", cut, id="toolu_1"))

    events, message = await stream(client, messages=[user("Pay ada 1200.")])

    json_parts = [
        e.delta.partial_json
        for e in events
        if e.type == "content_block_delta" and e.delta.type == "input_json_delta"
    ]
    assert "".join(json_parts) == cut
    kinds = [e.type for e in events if e.type != "content_block_delta"]
    assert kinds[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert [e.index for e in events if e.type == "content_block_stop"] == [0, 1]
    assert message.stop_reason == "max_tokens"
    # The SDK parses the cut JSON leniently: the danger Waypoint must guard against.
    assert message.content[1].input == {"payee": "ada", "amount": 12}


@pytest.mark.parametrize("reason", ["pause_turn", "model_context_window_exceeded", "max_tokens"])
async def test_other_stop_reasons_arrive_as_sent(
    api: FakeMessagesAPI, client: AsyncAnthropic, reason: str
) -> None:
    api.enqueue_message(text("So far"), stop_reason=reason)
    api.enqueue_message(text("So far"), stop_reason=reason)

    _, streamed = await stream(client, messages=[user("Go.")])
    whole = await client.messages.create(model=MODEL, max_tokens=10, messages=[user("Go.")])

    assert streamed.stop_reason == whole.stop_reason == reason
    assert streamed.content[0].text == "So far"


async def test_refusal_carries_its_stop_details_streamed_or_not(
    api: FakeMessagesAPI, client: AsyncAnthropic
) -> None:
    api.enqueue_refusal(text("I can"), category="bio", explanation="Could enable harm.")
    api.enqueue_refusal()

    events, streamed = await stream(client, messages=[user("Go.")])
    whole = await client.messages.create(model=MODEL, max_tokens=10, messages=[user("Go.")])

    (delta,) = [e for e in events if e.type == "message_delta"]
    assert delta.delta.stop_details.category == "bio"
    assert streamed.stop_reason == "refusal" and streamed.content[0].text == "I can"
    assert streamed.stop_details.explanation == "Could enable harm."
    assert whole.stop_reason == "refusal" and whole.stop_details.category == "cyber"


async def test_a_stop_sequence_arrives_in_the_delta_and_the_message_streamed_or_not(
    api: FakeMessagesAPI, client: AsyncAnthropic
) -> None:
    api.enqueue_message(text("Vendor: Acme"), stop_sequence="</done>")
    api.enqueue_message(text("Vendor: Acme"), stop_sequence="</done>")

    events, streamed = await stream(client, messages=hi(), stop_sequences=["</done>"])
    whole = await client.messages.create(
        model=MODEL, max_tokens=10, messages=hi(), stop_sequences=["</done>"]
    )

    (delta,) = [e for e in events if e.type == "message_delta"]
    assert delta.delta.stop_sequence == "</done>"
    for message in (streamed, whole):
        assert (message.stop_reason, message.stop_sequence) == ("stop_sequence", "</done>")


@pytest.mark.parametrize(
    "stop_reason, stop_sequence", [("stop_sequence", None), ("end_turn", "</done>")]
)
def test_a_stop_sequence_without_its_stop_reason_is_not_scriptable(
    stop_reason: str, stop_sequence: str | None
) -> None:
    with FakeMessagesAPI() as api, pytest.raises(ValueError, match="comes with a stop_sequence"):
        api.enqueue_message(text("x"), stop_reason=stop_reason, stop_sequence=stop_sequence)
    with pytest.raises(ValueError, match="comes with a stop_sequence"):
        reply(text("x"), stop_reason=stop_reason, stop_sequence=stop_sequence)


async def test_a_prompt_over_the_context_window_is_a_400_until_it_is_shortened(
    api: FakeMessagesAPI, client: AsyncAnthropic
) -> None:
    api.context_window = 1000
    api.enqueue_message(text("Fits now."))
    long = [user("y" * 5000)]
    size = tokens(text("y" * 5000))

    with pytest.raises(anthropic.BadRequestError) as raised:
        await stream(client, messages=long)
    assert raised.value.api_message == (  # type: ignore[attr-defined]
        f"prompt is too long: {size} tokens > 1000 maximum"
    )
    _, message = await stream(client, messages=[user("A summary.")])
    assert message.content[0].text == "Fits now."
    assert len(api.message_requests) == 2


# --- Models ---------------------------------------------------------------------------------


async def test_model_lookup_knows_claude_ids_and_404s_others(
    api: FakeMessagesAPI, client: AsyncAnthropic
) -> None:
    found = await client.models.retrieve("claude-sonnet-4-6")
    assert found.id == "claude-sonnet-4-6" and found.type == "model"
    with pytest.raises(anthropic.NotFoundError):
        await client.models.retrieve("gpt-4o")
    with pytest.raises(anthropic.NotFoundError, match="model: gpt-4o"):
        await stream(client, model="gpt-4o", messages=[user("Hi.")])
    assert [r.method for r in api.requests] == ["GET", "GET", "POST"]
    assert len(api.message_requests) == 1


async def test_a_model_lookup_gets_only_the_errors_scripted_for_lookups(
    api: FakeMessagesAPI, client: AsyncAnthropic
) -> None:
    api.enqueue_error(529, lookup=True)
    api.enqueue_error(500)  # for the message call, not the look-ups
    api.enqueue_message(text("Hi."))

    with pytest.raises(anthropic.APIStatusError) as raised:
        await client.models.retrieve(MODEL)
    assert raised.value.status_code == 529
    assert (await client.models.retrieve(MODEL)).id == MODEL
    with pytest.raises(anthropic.APIStatusError) as failed:
        await stream(client, messages=hi())
    assert failed.value.status_code == 500
    _, message = await stream(client, messages=hi())
    assert first_text(message) == "Hi."


async def test_an_unknown_route_is_a_404_that_takes_no_answer(
    api: FakeMessagesAPI, client: AsyncAnthropic
) -> None:
    api.enqueue_message(text("Hi."))

    with pytest.raises(anthropic.NotFoundError, match="no route /v1/complete"):
        await client.post("/v1/complete", cast_to=object, body={"model": MODEL})
    _, message = await stream(client, messages=hi())
    assert first_text(message) == "Hi."


async def test_a_configured_model_set_is_all_that_exists() -> None:
    with FakeMessagesAPI(models={"claude-opus-4-7"}) as api:
        async with AsyncAnthropic(base_url=api.base_url, api_key="t", max_retries=0) as client:
            assert (await client.models.retrieve("claude-opus-4-7")).id == "claude-opus-4-7"
            with pytest.raises(anthropic.NotFoundError):
                await client.models.retrieve("claude-sonnet-4-6")


async def test_an_image_counts_as_a_flat_estimate_not_its_base64(
    api: FakeMessagesAPI, client: AsyncAnthropic
) -> None:
    api.context_window = 5000
    api.enqueue_message(text("A cat."))
    image = {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": "A" * 400_000},
    }
    result = {"type": "tool_result", "tool_use_id": "toolu_1", "content": [image]}
    messages = tool_turn([tool_use("look", {}, id="toolu_1")], "toolu_1")[:2]
    messages.append({"role": "user", "content": [result]})

    _, message = await stream(client, messages=messages)

    assert message.content[0].text == "A cat."
    assert MEDIA_TOKENS < api.usages[0]["input_tokens"] < MEDIA_TOKENS + 200


# --- Vertex AI ------------------------------------------------------------------------------


@pytest.fixture
async def vertex(api: FakeMessagesAPI) -> AsyncIterator[AsyncAnthropicVertex]:
    client = AsyncAnthropicVertex(
        region="europe-west1",
        project_id="proj",
        access_token="gcp-token",
        base_url=api.base_url,
        max_retries=0,
    )
    async with client:
        yield client


async def test_vertex_route_answers_the_model_named_in_its_path_streamed_or_not(
    api: FakeMessagesAPI, vertex: AsyncAnthropicVertex
) -> None:
    api.enqueue_message(text("Streamed."))
    api.enqueue_message(text("Whole."))
    params: dict[str, Any] = {"model": MODEL, "max_tokens": 10, "messages": hi()}

    async with vertex.messages.stream(**params) as s:
        streamed = await s.get_final_message()
    whole = await vertex.messages.create(**params)

    assert first_text(streamed) == "Streamed." and first_text(whole) == "Whole."
    assert streamed.model == whole.model == MODEL
    base = f"/projects/proj/locations/europe-west1/publishers/anthropic/models/{MODEL}"
    assert [r.path for r in api.requests] == [f"{base}:streamRawPredict", f"{base}:rawPredict"]
    assert all("model" not in r.body for r in api.requests)
    assert api.usages[0]["input_tokens"] == tokens(text("Hi."))  # counted as on /v1/messages


async def test_vertex_route_checks_the_path_model_and_the_body_version(
    api: FakeMessagesAPI, vertex: AsyncAnthropicVertex
) -> None:
    api.models = {MODEL}
    api.enqueue_message(text("Kept for the next good request."))

    with pytest.raises(anthropic.NotFoundError, match="model: claude-nope-9"):
        await vertex.messages.create(model="claude-nope-9", max_tokens=10, messages=hi())
    url = f"{api.base_url}/projects/p/locations/l/publishers/anthropic/models/{MODEL}:rawPredict"
    body = json.dumps({"max_tokens": 10, "messages": hi()}).encode()
    status, answer = await asyncio.to_thread(_post, url, body)
    assert status == 400 and answer["error"]["message"] == "anthropic_version: Field required"
    message = await vertex.messages.create(model=MODEL, max_tokens=10, messages=hi())
    assert first_text(message) == "Kept for the next good request."


def _post(url: str, body: bytes) -> tuple[int, Any]:
    """A bare POST, for a request the SDK would never send."""
    request = urllib.request.Request(url, body, {"content-type": "application/json"})
    try:
        with urllib.request.urlopen(request) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())
