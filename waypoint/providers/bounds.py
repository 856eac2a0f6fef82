"""A reply's tool input is bounded before it is recorded, so a run can always read its history.

pydantic writes JSON nested up to ~255 levels but reads it back only to ~200: a reply whose tool
input nested ~210 deep completed its model step, and then every workflow task failed decoding
it, for ever. About 420 bracket characters in a tool result are enough for a prompt injection to
ask for it. An input deeper or larger than these limits is marked invalid (the call never runs;
the model reads an error result and may try again), like a call cut off by `max_tokens`.
"""

from __future__ import annotations

import json

from waypoint.protocol import ModelResponse, ToolUseBlock

MAX_INPUT_DEPTH = 64
"""Levels of nesting one tool input may have: far inside what pydantic reads back (~200)."""
MAX_INPUT_BYTES = 256 * 1024
"""Bytes of one tool input's JSON: a reply stays well inside Temporal's 2 MB payload limit."""


def depth_beyond(value: object, limit: int) -> bool:
    """Whether `value` nests deeper than `limit` (iteratively: no recursion limit to meet)."""
    stack: list[tuple[object, int]] = [(value, 0)]
    while stack:
        item, level = stack.pop()
        children = (
            item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        )
        if children is None:
            continue
        if level + 1 > limit:
            return True
        stack.extend((child, level + 1) for child in children)
    return False


def why_unbounded(arguments: dict[str, object]) -> str | None:
    """Why a tool input cannot be recorded, or None."""
    if depth_beyond(arguments, MAX_INPUT_DEPTH):
        return (
            f"tool input nests deeper than {MAX_INPUT_DEPTH} levels, more than this agent "
            "accepts: send a flatter input"
        )
    size = len(json.dumps(arguments, ensure_ascii=False).encode())
    if size > MAX_INPUT_BYTES:
        return (
            f"tool input is {size:,} bytes of JSON, more than the {MAX_INPUT_BYTES:,} this "
            "agent accepts: send less, or pass a reference to the data"
        )
    return None


def bounded(response: ModelResponse) -> ModelResponse:
    """`response` with each oversized tool call marked invalid and its input dropped."""
    blocks = list(response.content)
    changed = False
    for i, block in enumerate(blocks):
        if isinstance(block, ToolUseBlock) and block.invalid is None:
            why = why_unbounded(block.input)
            if why is not None:
                blocks[i] = block.model_copy(update={"input": {}, "invalid": why})
                changed = True
    return response.model_copy(update={"content": blocks}) if changed else response
