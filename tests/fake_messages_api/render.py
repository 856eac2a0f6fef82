"""An answer rendered as the API sends it: one JSON message, or server-sent events.

Streaming follows the API's event order: message_start (usage without output), ping, then per
block content_block_start, its deltas and content_block_stop, then message_delta (stop reason,
stop sequence, stop details, cumulative usage) and message_stop. Thinking streams
thinking_delta events then one signature_delta; redacted_thinking arrives whole in its
content_block_start. A tool_use cut off at max_tokens streams the JSON it got to and still
closes its block, as the API does. A server_tool_use streams its input as a tool_use does; a
server tool's result (and any other block) arrives whole in its content_block_start. Text with
citations streams one citations_delta per citation before its text_delta events.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from typing import Any

ids = itertools.count(1)

PARTIAL = "_partial_json"
"""Key of a scripted tool_use block whose input JSON was cut off (see `tool_use_partial`)."""

Event = tuple[str, dict[str, Any]]


def public_block(block: dict[str, Any]) -> dict[str, Any]:
    """A content block as a non-streaming answer shows it."""
    if PARTIAL in block:
        # Not checked against the real API: a cut-off call shows the input it could not parse.
        return {k: v for k, v in block.items() if k != PARTIAL} | {"input": {}}
    return block


@dataclass(frozen=True)
class Answer:
    """What one answer says, sent whole or streamed."""

    content: list[dict[str, Any]]
    stop_reason: str
    usage: dict[str, Any]
    model: str
    stop_details: dict[str, Any] | None = None
    stop_sequence: str | None = None
    container: dict[str, Any] | None = None
    """The code-execution container the answer ran in."""

    def closing(self) -> dict[str, Any]:
        """How it ended: what a whole message holds at its end, and a stream's message_delta."""
        end: dict[str, Any] = {"stop_reason": self.stop_reason, "stop_sequence": self.stop_sequence}
        if self.stop_details is not None:
            end["stop_details"] = self.stop_details
        if self.container is not None:
            end["container"] = self.container
        return end


def message_json(answer: Answer) -> dict[str, Any]:
    """A whole answer, as `POST /v1/messages` without `stream` returns it."""
    return {
        "id": f"msg_fake{next(ids)}",
        "type": "message",
        "role": "assistant",
        "model": answer.model,
        "content": [public_block(b) for b in answer.content],
        **answer.closing(),
        "usage": answer.usage,
    }


def message_start(model: str, usage: dict[str, Any]) -> Event:
    """The first event: the message without content, usage without output tokens."""
    message = {
        "id": f"msg_fake{next(ids)}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {**usage, "output_tokens": 1},
    }
    return "message_start", {"type": "message_start", "message": message}


def message_events(answer: Answer) -> list[Event]:
    """Every event of a streamed answer."""
    usage = answer.usage
    start_usage = {k: v for k, v in usage.items() if k != "output_tokens"}
    events = [message_start(answer.model, start_usage), ("ping", {"type": "ping"})]
    for index, block in enumerate(answer.content):
        start, deltas = _block_start_and_deltas(block)
        events.append(
            (
                "content_block_start",
                {"type": "content_block_start", "index": index, "content_block": start},
            )
        )
        for delta in deltas:
            events.append(
                (
                    "content_block_delta",
                    {"type": "content_block_delta", "index": index, "delta": delta},
                )
            )
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    delta = answer.closing()
    delta_usage = {k: v for k, v in usage.items() if isinstance(v, int)}
    events.append(
        ("message_delta", {"type": "message_delta", "delta": delta, "usage": delta_usage})
    )
    events.append(("message_stop", {"type": "message_stop"}))
    return events


def _block_start_and_deltas(block: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    kind = block["type"]
    if kind == "text":
        cited = [{"type": "citations_delta", "citation": c} for c in block.get("citations", [])]
        start: dict[str, Any] = {"type": "text", "text": ""} | ({"citations": []} if cited else {})
        return start, cited + [
            {"type": "text_delta", "text": part} for part in split(block["text"])
        ]
    if kind in ("tool_use", "server_tool_use"):
        raw = block[PARTIAL] if PARTIAL in block else json.dumps(block["input"])
        start = {k: v for k, v in block.items() if k != PARTIAL} | {"input": {}}
        return start, [{"type": "input_json_delta", "partial_json": part} for part in split(raw)]
    if kind == "thinking":
        deltas: list[dict[str, Any]] = [
            {"type": "thinking_delta", "thinking": part} for part in split(block["thinking"])
        ]
        deltas.append({"type": "signature_delta", "signature": block["signature"]})
        return {"type": "thinking", "thinking": "", "signature": ""}, deltas
    return dict(block), []  # redacted_thinking, a server tool's result, container_upload, ...


def split(value: str, parts: int = 3) -> list[str]:
    """Cut a string into a few pieces, as the API's deltas do."""
    size = max(1, -(-len(value) // parts))
    return [value[i : i + size] for i in range(0, len(value), size)] or [""]
