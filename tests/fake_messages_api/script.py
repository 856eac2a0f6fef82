"""The script's entries and the recorded requests: what tests write and read back."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tests.fake_messages_api import render

ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    408: "timeout_error",
    409: "conflict_error",
    413: "request_too_large",
    422: "invalid_request_error",
    429: "rate_limit_error",
    500: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}

MESSAGES = "/v1/messages"


@dataclass
class RecordedRequest:
    """One HTTP request the server received."""

    method: str
    path: str
    headers: dict[str, str]
    """Header names lower-cased."""
    body: Any


@dataclass
class ScriptedMessage:
    """A successful answer."""

    content: list[dict[str, Any]]
    stop_reason: str
    usage: dict[str, Any] | None = None
    """Usage as given; None: counted by the server from the request and the answer."""
    model: str | None = None
    """None: echo the requested model."""
    event_delay: float = 0.0
    """Seconds between streamed events."""
    cut_after: int | None = None
    """End the stream after this many events, as a dropped connection would."""
    stop_details: dict[str, Any] | None = None
    """Sent in message_delta (and the message) with a `refusal`."""
    usage_overrides: dict[str, Any] = field(default_factory=dict)
    """With counted usage: fields that replace the counted ones."""
    stop_sequence: str | None = None
    """Which stop sequence ended the answer; only with stop_reason `stop_sequence`."""
    container: dict[str, Any] | None = None
    """The code-execution container the answer ran in (`id`, `expires_at`)."""


@dataclass
class ScriptedError:
    """A failed answer: an HTTP error, or an `error` event inside a 200 stream."""

    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)
    mid_stream: bool = False


AutoAnswer = Callable[[dict[str, Any]], "ScriptedMessage | Sequence[dict[str, Any]]"]
"""Builds the answer to a request body: a `reply(...)` or just its content blocks."""


def reply(
    *content: dict[str, Any],
    stop_reason: str | None = None,
    stop_details: dict[str, Any] | None = None,
    stop_sequence: str | None = None,
) -> ScriptedMessage:
    """An answer whose usage the server counts; `stop_reason` defaults as in `enqueue_message`."""
    return ScriptedMessage(
        list(content),
        stop_reason_for(content, stop_reason, stop_sequence),
        None,
        None,
        stop_details=stop_details,
        stop_sequence=stop_sequence,
    )


def stop_reason_for(
    content: Sequence[dict[str, Any]], stop_reason: str | None, stop_sequence: str | None
) -> str:
    """The stop reason given or implied: max_tokens (a cut-off call), stop_sequence, tool_use...

    The API names a stop sequence exactly when it stopped on one; a script that says otherwise
    is refused, as the API never sends it.
    """
    if stop_reason is None:
        if any(render.PARTIAL in block for block in content):
            stop_reason = "max_tokens"
        elif stop_sequence is not None:
            stop_reason = "stop_sequence"
        elif any(b["type"] == "tool_use" for b in content):
            stop_reason = "tool_use"
        else:
            stop_reason = "end_turn"
    if (stop_reason == "stop_sequence") != (stop_sequence is not None):
        raise ValueError("stop_reason 'stop_sequence' comes with a stop_sequence, and only it")
    return stop_reason


def error_body(error_type: str, message: str) -> dict[str, Any]:
    """An error in Anthropic's format."""
    return {
        "type": "error",
        "error": {"type": error_type, "message": message},
        "request_id": f"req_fake{next(render.ids)}",
    }
