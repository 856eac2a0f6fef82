"""A local HTTP server that speaks the Messages API as the real one does, for the real client.

Tests script its answers in order (a message, or an error) and read back every request it got,
so they can assert on the exact body sent and count HTTP calls. Streaming answers are sent as
server-sent events, one chunk at a time, so the client really streams.

    with FakeMessagesAPI() as api:
        api.enqueue_message(tool_use("lookup", {"q": "x"}), usage={"input_tokens": 10})
        api.enqueue_error(429, retry_after=3)
        client = AsyncAnthropic(base_url=api.base_url, api_key="test", max_retries=0)
        ...
        assert len(api.requests) == 2

It also holds the client to the API's rules (`rules`): thinking blocks must come back signed
and in place, prompts must fit `context_window`, cache markers must be few and ordered; a broken
rule is the API's 400, and takes nothing from the script. With `count_tokens=True` (or an
`auto_answer`) usage is counted from the request, prompt caching included (`prompt` describes
the estimate and the cache). `GET /v1/models/{id}` (a scripted error at the head of the
script answers it first) and `POST /v1/messages/count_tokens` answer too; messages also come
by Vertex AI's route, the model named in the path. Pieces: `server` (state and answers),
`script` (entries, recorded requests), `handler` (HTTP routes), `render` (JSON and SSE),
`prompt` (tokens, cache), `rules` (400s).
"""

from __future__ import annotations

from typing import Any

from tests.fake_messages_api.render import PARTIAL, ids
from tests.fake_messages_api.script import (
    ERROR_TYPES,
    AutoAnswer,
    RecordedRequest,
    ScriptedError,
    ScriptedMessage,
    reply,
)
from tests.fake_messages_api.server import FakeMessagesAPI

__all__ = [
    "ERROR_TYPES",
    "AutoAnswer",
    "FakeMessagesAPI",
    "RecordedRequest",
    "ScriptedError",
    "ScriptedMessage",
    "redacted_thinking",
    "reply",
    "text",
    "thinking",
    "tool_use",
    "tool_use_partial",
]


def text(value: str) -> dict[str, Any]:
    """A text content block for `enqueue_message`."""
    return {"type": "text", "text": value}


def tool_use(name: str, input: dict[str, Any], id: str | None = None) -> dict[str, Any]:
    """A tool_use content block for `enqueue_message`."""
    return {"type": "tool_use", "id": id or f"toolu_fake{next(ids)}", "name": name, "input": input}


def tool_use_partial(name: str, partial_json: str, id: str | None = None) -> dict[str, Any]:
    """A tool_use cut off at max_tokens: it streams `partial_json` and no more."""
    block = tool_use(name, {}, id)
    block[PARTIAL] = partial_json
    return block


def thinking(value: str, signature: str | None = None) -> dict[str, Any]:
    """A thinking block; the server signs it when it answers unless `signature` is given."""
    return {"type": "thinking", "thinking": value, "signature": signature}


def redacted_thinking(data: str | None = None) -> dict[str, Any]:
    """A redacted_thinking block; the server issues its opaque `data` unless given."""
    return {"type": "redacted_thinking", "data": data}
