"""How large and how deep what a model, a tool or a client sends may be before history holds it.

pydantic writes JSON nested up to ~255 levels but reads it back only to ~200: a reply whose tool
input nested ~210 deep completed its model step, and then every workflow task failed decoding
it, for ever; about 420 bracket characters in a tool result are enough for a prompt injection to
ask for one. One payload past Temporal's limit (2 MB by default) fails its step on every try.
Pure functions over JSON values, so workflow code checks client answers with them too.
"""

from __future__ import annotations

import json

from pydantic import Field

from waypoint.protocol.base import _Frozen


class SizeLimits(_Frozen):
    """Limits on one tool input, tool result and client answer (`Agent(size_limits=...)`).

    The defaults sit well inside what pydantic reads back (~200 levels) and Temporal's payload
    limit (2 MB); a payload store (`WAYPOINT_PAYLOAD_STORE`) lifts the limit on results.
    """

    max_depth: int = Field(default=64, ge=1, le=150)
    """Levels of nesting of a tool input or a client answer."""
    max_input_bytes: int = Field(default=256 * 1024, ge=1)
    """Bytes of one tool input's JSON (or a client answer's)."""
    max_result_bytes: int | None = Field(default=None, ge=1)
    """Bytes of one tool result's text: a longer one is cut, and the model is told so. None:
    `INLINE_RESULT_BYTES` when payloads stay in history, no cut when they go to a payload store
    (which holds what the payload limit cannot)."""


INLINE_RESULT_BYTES = 512 * 1024
"""A tool result's bound, with no payload store: well inside Temporal's 2 MB payload limit."""


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


def why_unbounded(value: object, bounds: SizeLimits, what: str = "tool input") -> str | None:
    """Why `value` (a tool input or a client answer) cannot be recorded, or None."""
    if depth_beyond(value, bounds.max_depth):
        return (
            f"{what} nests deeper than {bounds.max_depth} levels, more than this agent "
            "accepts: send a flatter one"
        )
    size = len(json.dumps(value, ensure_ascii=False).encode())
    if size > bounds.max_input_bytes:
        return (
            f"{what} is {size:,} bytes of JSON, more than the {bounds.max_input_bytes:,} this "
            "agent accepts: send less, or pass a reference to the data"
        )
    return None


def cut_result(text: str, limit: int | None) -> str:
    """A tool result's text within `limit` bytes (None: whole), saying how much was left out."""
    data = text.encode()
    if limit is None or len(data) <= limit:
        return text
    note = (
        f"\n[waypoint: this result was {len(data):,} bytes; only the first "
        f"{limit:,} are shown. Ask for less, or for a part of it.]"
    )
    keep = max(0, limit - len(note.encode()))
    return data[:keep].decode(errors="ignore") + note
