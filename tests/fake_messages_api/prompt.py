"""The prompt as the API sees it: parts in order, a token estimate, and the prompt cache.

Token estimate (deterministic, not Anthropic's tokenizer): every part of the prompt is
rendered as canonical JSON (sorted keys, no spaces, `cache_control` removed) and costs
ceil(characters / 4) tokens. The parts, in the API's order: each tool definition, the system
prompt (a string is one text part, a list one part per block), then each content block of each
message (a string content is one text part). An image or document costs a flat
`MEDIA_TOKENS` instead of its base64 characters, which would overflow any context window. An
answer's output tokens are estimated the same way from its content blocks.

Prompt caching follows the documented rules: a `cache_control` marker (at most 4, and a "1h"
one never after a "5m" one) closes a prefix; the top-level `cache_control` marks the last part.
For each marker the cache is looked up at that part and up to 20 parts before it; the longest
live prefix found (same model, byte-identical parts) is read and its TTL refreshed. Each marker
past it whose prefix reaches the minimum cacheable length is written with its own TTL, and the
tokens between the read prefix and the last written one are billed as writes of that TTL. What
follows is billed as plain input.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

LOOKBACK = 20
"""Parts before a marker where the API also looks for an earlier cache entry."""

MEDIA_TOKENS = 1500
"""Tokens of one image or document (a mid-sized image in the real API: width x height / 750)."""

MAX_BREAKPOINTS = 4
TTL_SECONDS = {"5m": 300.0, "1h": 3600.0}


class PromptError(ValueError):
    """The request breaks a rule the real API enforces with a 400."""


def canonical(value: Any) -> str:
    """The JSON a part is measured and compared by."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def estimate_tokens(value: Any) -> int:
    """ceil(len(canonical JSON) / 4), at least 1, each image or document at `MEDIA_TOKENS`."""
    media: list[int] = []
    stripped = _strip_media(value, media)
    return max(1, math.ceil(len(canonical(stripped)) / 4)) + MEDIA_TOKENS * len(media)


def _strip_media(value: Any, media: list[int]) -> Any:
    """`value` with the bytes of its images and documents left out, counted in `media`."""
    if isinstance(value, list):
        return [_strip_media(item, media) for item in value]
    if not isinstance(value, dict):
        return value
    if value.get("type") in ("image", "document") and isinstance(value.get("source"), dict):
        media.append(1)
        return {**value, "source": {k: v for k, v in value["source"].items() if k != "data"}}
    return {k: _strip_media(v, media) for k, v in value.items()}


@dataclass(frozen=True)
class Part:
    """One part of the rendered prompt."""

    key: str
    """Hash of the model and every part up to and including this one."""
    tokens: int
    ttl: str | None
    """The TTL of a `cache_control` marker on this part; None: no marker."""


def parts_of(body: dict[str, Any]) -> list[Part]:
    """The prompt's parts in render order (tools -> system -> messages), keys chained."""
    raw: list[tuple[str, dict[str, Any]]] = []
    for tool in body.get("tools") or []:
        raw.append(("tools", tool))
    system = body.get("system")
    if isinstance(system, str) and system:
        raw.append(("system", {"type": "text", "text": system}))
    elif isinstance(system, list):
        raw.extend(("system", block) for block in system)
    for index, message in enumerate(body.get("messages") or []):
        content = message.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        tag = f"messages.{index}.{message.get('role')}"
        raw.extend((tag, block) for block in blocks or [])
    top_level = body.get("cache_control")
    chain = hashlib.sha256(canonical(body.get("model", "")).encode())
    parts: list[Part] = []
    for position, (tag, block) in enumerate(raw):
        marker = block.get("cache_control") if isinstance(block, dict) else None
        if top_level and position == len(raw) - 1 and not marker:
            marker = top_level
        clean = {k: v for k, v in block.items() if k != "cache_control"}
        chain.update(f"\x00{tag}\x00{canonical(clean)}".encode())
        ttl = (marker.get("ttl") or "5m") if isinstance(marker, dict) else None
        parts.append(Part(chain.copy().hexdigest(), estimate_tokens(clean), ttl))
    _check_markers(parts)
    return parts


def _check_markers(parts: list[Part]) -> None:
    ttls = [p.ttl for p in parts if p.ttl]
    if len(ttls) > MAX_BREAKPOINTS:
        raise PromptError(
            f"A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. "
            f"Found {len(ttls)}."
        )
    if any(ttl not in TTL_SECONDS for ttl in ttls):
        raise PromptError("cache_control.ttl: Input should be '5m' or '1h'")
    if "5m" in ttls and "1h" in ttls[ttls.index("5m") :]:
        raise PromptError(
            "a ttl='1h' cache_control block must not come after a ttl='5m' cache_control "
            "block. Note that the order of processing is: 'tools', 'system', 'messages'."
        )


def prompt_tokens(parts: list[Part]) -> int:
    """The estimated size of the whole prompt."""
    return sum(p.tokens for p in parts)


@dataclass
class _Entry:
    expires: float
    ttl: str


@dataclass
class PromptCache:
    """Cache entries by prefix key, with expiry on an injectable clock (seconds)."""

    clock: Callable[[], float]
    min_tokens: int = 1024
    entries: dict[str, _Entry] = field(default_factory=dict)

    def account(self, parts: list[Part]) -> dict[str, Any]:
        """Look the prompt up, write what is new, and return the API's usage fields for it."""
        now = self.clock()
        cumulative: list[int] = []
        total = 0
        for part in parts:
            total += part.tokens
            cumulative.append(total)
        markers = [i for i, p in enumerate(parts) if p.ttl]
        hit = -1
        for marker in markers:
            for i in range(marker, max(-1, marker - LOOKBACK - 1), -1):
                if i <= hit:
                    break
                entry = self.entries.get(parts[i].key)
                if entry is not None and entry.expires > now:
                    hit = i
                    break
        read = cumulative[hit] if hit >= 0 else 0
        if hit >= 0:
            entry = self.entries[parts[hit].key]
            entry.expires = now + TTL_SECONDS[entry.ttl]
        written = {"5m": 0, "1h": 0}
        covered = read
        for marker in markers:
            if marker <= hit or cumulative[marker] < self.min_tokens:
                continue
            ttl = parts[marker].ttl or "5m"
            written[ttl] += cumulative[marker] - covered
            covered = cumulative[marker]
            self.entries[parts[marker].key] = _Entry(now + TTL_SECONDS[ttl], ttl)
        return {
            "input_tokens": total - covered,
            "cache_creation_input_tokens": written["5m"] + written["1h"],
            "cache_read_input_tokens": read,
            "cache_creation": {
                "ephemeral_5m_input_tokens": written["5m"],
                "ephemeral_1h_input_tokens": written["1h"],
            },
        }
