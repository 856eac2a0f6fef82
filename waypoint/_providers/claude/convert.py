"""Waypoint's message models to Messages API params, and the API's replies back.

Anthropic's SDK types stay inside `waypoint._providers.claude`: history holds only our own
models, so it does not depend on an SDK version. Thinking blocks cross both ways verbatim,
signature and encrypted data byte for byte, because the API rejects a tool turn whose thinking
was altered; so do server tool blocks and any block type this version does not know
(`ServerBlock`), and the citations on text.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from typing import Any, cast

from anthropic.types import (
    ContentBlockParam,
    DocumentBlockParam,
    ImageBlockParam,
    MessageParam,
    SearchResultBlockParam,
    TextBlockParam,
    ToolParam,
)
from anthropic.types import Message as APIMessage

from waypoint.protocol import Container, ToolSpec, Usage, messages
from waypoint.protocol.billing import SERVER_USES
from waypoint.protocol.vocabulary import MAX_TOKENS

CUT_OFF = "cut off at max_tokens"
"""`ToolUseBlock.invalid` of the call a reply was writing when it hit `max_tokens`."""

# --- To the API -----------------------------------------------------------------------------


def tool_param(tool: ToolSpec) -> ToolParam:
    """A tool definition as the API takes it: by type when Anthropic defines its schema."""
    if tool.anthropic_type:
        return cast(ToolParam, {"type": tool.anthropic_type, "name": tool.name})
    return {
        "name": tool.name,
        "description": tool.description,
        "input_schema": tool.input_schema,
    }


def message_param(message: messages.Message) -> MessageParam:
    """One transcript message as the API takes it."""
    content = [block_param(b) for b in message.content]
    return cast(MessageParam, {"role": message.role, "content": content})


def block_param(block: messages.ContentBlock) -> ContentBlockParam:
    """One content block; a tool call's `invalid` note is ours and never sent."""
    if isinstance(block, messages.ToolUseBlock):
        call = {"type": "tool_use", "id": block.id, "name": block.name, "input": block.input}
        return cast(ContentBlockParam, call | ({"caller": block.caller} if block.caller else {}))
    if isinstance(block, messages.ToolResultBlock):
        content = block.content
        return {
            "type": "tool_result",
            "tool_use_id": block.tool_use_id,
            "content": content if isinstance(content, str) else [rich_param(b) for b in content],
            "is_error": block.is_error,
        }
    if isinstance(block, messages.ThinkingBlock):
        return {"type": "thinking", "thinking": block.thinking, "signature": block.signature}
    if isinstance(block, messages.RedactedThinkingBlock):
        return {"type": "redacted_thinking", "data": block.data}
    if isinstance(block, messages.ServerBlock):
        return cast(ContentBlockParam, dict(block.block))  # as the API sent it
    return rich_param(block)


def rich_param(
    block: messages.RichBlock,
) -> TextBlockParam | ImageBlockParam | DocumentBlockParam | SearchResultBlockParam:
    """Text, an image, a document or a search result, inside a message or a tool result."""
    if isinstance(block, messages.TextBlock):
        if block.citations:
            return cast(
                TextBlockParam, {"type": "text", "text": block.text, "citations": block.citations}
            )
        return {"type": "text", "text": block.text}
    if isinstance(block, messages.ImageBlock):
        return {
            "type": "image",
            "source": {"type": "base64", "media_type": block.media_type, "data": block.data},
        }
    if isinstance(block, messages.SearchResultBlock):
        return {
            "type": "search_result",
            "source": block.source,
            "title": block.title,
            "content": [{"type": "text", "text": b.text} for b in block.content],
            "citations": {"enabled": block.citations},
        }
    return _document_param(block)


def _document_param(block: messages.DocumentBlock) -> DocumentBlockParam:
    # The API takes a PDF as base64 but plain text as text, so a text document is decoded.
    param: DocumentBlockParam = {
        "type": "document",
        "source": {"type": "text", "media_type": "text/plain", "data": _text_of(block.data)}
        if block.media_type == "text/plain"
        else {"type": "base64", "media_type": "application/pdf", "data": block.data},
    }
    if block.title:
        param["title"] = block.title
    if block.context:
        param["context"] = block.context
    if block.citations:
        param["citations"] = {"enabled": True}
    return param


def _text_of(data: str) -> str:
    try:
        return base64.b64decode(data, validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return data  # already plain text


# --- From the API ---------------------------------------------------------------------------


def reply_blocks(message: APIMessage) -> list[messages.ContentBlock]:
    """Every block of the reply: ours converted, any other kept whole as a `ServerBlock`.

    A tool call whose input is not a JSON object, or the call a reply was writing when it hit
    `max_tokens`, is marked `invalid` so it never runs: the SDK parses cut-off JSON leniently,
    and `{"amount": 12` would otherwise become a payment of 12. So is a call holding `NaN` or
    `Infinity` (not JSON, yet parsed): it would reach the run as `null`, which no policy
    threshold matches, so an "ask above 1000" rule would let it through.
    """
    blocks: list[messages.ContentBlock] = []
    for block in message.content:
        if block.type == "text":
            cited = [c.to_dict() for c in block.citations] if block.citations else None
            blocks.append(messages.TextBlock(text=block.text, citations=cited))
        elif block.type == "thinking":
            blocks.append(
                messages.ThinkingBlock(thinking=block.thinking, signature=block.signature)
            )
        elif block.type == "redacted_thinking":
            blocks.append(messages.RedactedThinkingBlock(data=block.data))
        elif block.type == "tool_use":
            call = _tool_use(block.id, block.name, block.input)
            caller = block.caller.to_dict() if block.caller else None
            blocks.append(call.model_copy(update={"caller": caller}) if caller else call)
        else:  # a server tool's call or result, or a type this version does not know
            blocks.append(messages.ServerBlock(type=block.type, block=block.to_dict()))
    if message.stop_reason == MAX_TOKENS:
        _mark_last_call_cut_off(blocks)
    return blocks


def _tool_use(id: str, name: str, arguments: object) -> messages.ToolUseBlock:
    if isinstance(arguments, dict):
        where = _non_finite(arguments, "")
        if where is None:
            return messages.ToolUseBlock(id=id, name=name, input=dict(arguments))
        return messages.ToolUseBlock(
            id=id,
            name=name,
            input={},
            invalid=f"tool input holds a non-finite number at {where or '(input)'}, which is not "
            "JSON: send a finite number",
        )
    shown = json.dumps(arguments, default=str)
    if len(shown) > 200:
        shown = shown[:200] + "..."
    return messages.ToolUseBlock(
        id=id, name=name, input={}, invalid=f"tool input was not a JSON object: {shown}"
    )


def _non_finite(value: object, path: str) -> str | None:
    """The dotted path of the first NaN or infinity in `value`, or None."""
    if isinstance(value, float) and not math.isfinite(value):
        return path
    items = (
        value.items()
        if isinstance(value, dict)
        else enumerate(value)
        if isinstance(value, list)
        else ()
    )
    for key, item in items:
        found = _non_finite(item, f"{path}.{key}" if path else str(key))
        if found is not None:
            return found
    return None


def _mark_last_call_cut_off(blocks: list[messages.ContentBlock]) -> None:
    for i in range(len(blocks) - 1, -1, -1):
        block = blocks[i]
        if isinstance(block, messages.ToolUseBlock):
            blocks[i] = block.model_copy(update={"invalid": CUT_OFF})
            return


def server_call_shown(arguments: object) -> str:
    """A server tool call in a few words for a person watching: its query, URL or code."""
    if isinstance(arguments, dict):
        for key in ("query", "url", "command", "code"):
            if isinstance(arguments.get(key), str):
                return arguments[key][:120]
    return json.dumps(arguments, default=str)[:120]


def container_of(message: APIMessage) -> Container | None:
    """The code-execution container the reply ran in, kept for the run's later calls."""
    found = message.container
    if found is None:
        return None
    return Container(id=found.id, expires_at=found.expires_at.isoformat())


def usage_of(message: APIMessage) -> Usage:
    """Tokens billed, with the 1-hour share of the cache writes apart."""
    usage = message.usage
    creation = usage.cache_creation
    server = usage.server_tool_use
    return Usage(
        input_tokens=usage.input_tokens or 0,
        output_tokens=usage.output_tokens or 0,
        cache_creation_input_tokens=usage.cache_creation_input_tokens or 0,
        cache_creation_1h_input_tokens=(creation.ephemeral_1h_input_tokens or 0) if creation else 0,
        cache_read_input_tokens=usage.cache_read_input_tokens or 0,
        **{u.usage: (getattr(server, u.usage, None) or 0) if server else 0 for u in SERVER_USES},
    )


def stop_details_of(message: APIMessage) -> str:
    """What the API said about a refusal, in one line: `category: explanation`."""
    details = message.stop_details
    if details is None:
        return ""
    parts: list[Any] = [details.category, details.explanation]
    return ": ".join(str(p) for p in parts if p)
