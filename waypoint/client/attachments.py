"""A run's attachments, described for a page and opened whole from its recorded input.

The blocks a run was started with (`runs.start_run(attachments=...)`) are in its first
history event; large ones are in the payload store, and the client's data converter brings
them back (checked against their hash). Opening one is a history read: it adds nothing to
the run.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import Any

from waypoint.protocol.messages import (
    DocumentBlock,
    ImageBlock,
    SearchResultBlock,
    text_of,
)

INLINE = {"image/jpeg", "image/png", "image/gif", "image/webp"}
"""Media types a browser may show in place; any other is sent as a download."""


@dataclass(frozen=True)
class Opened:
    """An attachment's bytes, as a response carries them."""

    data: bytes
    media_type: str
    name: str


def describe(block: Any) -> str:
    """One line for a page: kind, media type, title, size."""
    if isinstance(block, ImageBlock | DocumentBlock):
        title = f" {block.title!r}" if isinstance(block, DocumentBlock) and block.title else ""
        size = len(block.data) * 3 // 4
        return f"{block.type} {block.media_type}{title}, {size:,} bytes"
    if isinstance(block, SearchResultBlock):
        return f"search result {block.title!r} ({block.source})"
    return text_of([block])


def opened(block: Any, number: int) -> Opened:
    """Attachment `number` (from 1) as bytes with its media type and a file name.

    A search result or a text block opens as its text. Raises ValueError if its data is
    not base64 (a run's input is checked at start; this says so rather than fail).
    """
    if isinstance(block, ImageBlock | DocumentBlock):
        try:
            data = base64.b64decode(block.data, validate=True)
        except (binascii.Error, ValueError):
            raise ValueError(f"attachment {number}'s data is not base64") from None
        title = block.title if isinstance(block, DocumentBlock) else None
        extension = block.media_type.rpartition("/")[2].replace("plain", "txt")
        return Opened(data, block.media_type, _safe(title) or f"attachment-{number}.{extension}")
    if isinstance(block, SearchResultBlock):
        text = f"{block.title}\n{block.source}\n\n{text_of(list(block.content))}"
        return Opened(text.encode(), "text/plain; charset=utf-8", f"attachment-{number}.txt")
    text = text_of([block])
    return Opened(text.encode(), "text/plain; charset=utf-8", f"attachment-{number}.txt")


def _safe(name: str | None) -> str:
    """A title as a download's file name: printable ASCII without quotes or separators."""
    kept = "".join(c for c in (name or "") if c.isascii() and c.isprintable() and c not in '"\\/;')
    return kept.strip()[:100]
