"""Images, documents and search results for Claude: built here, checked before they travel.

A tool returns `image(...)`, `document(...)` or `search_result(...)` (alone or in a list with
text) and Claude sees it, citing a document or search result when it allows citations;
`waypoint start --attach FILE` sends one with the task. The type is read from the bytes (magic
numbers), never trusted from a file name, and the Messages API's limits are checked here,
where the error can name the file, instead of as a 400 many steps later:

- an image is PNG, JPEG, GIF or WEBP, at most 5 MiB once base64-encoded (the API checks the
  encoded length, so about 3.75 MiB of raw bytes) and at most 8000 px on a side;
- a document is a PDF (or UTF-8 text), at most 32 MiB once base64-encoded: the API's limit on a
  whole request, so a larger one could never be sent. The API also refuses PDFs over 100 pages,
  which only the API counts reliably.

Large blocks do not bloat history: with a payload store (`waypoint.stores.payloads`) any
payload above its threshold is stored once by hash and history keeps a reference.
"""

from __future__ import annotations

import base64
import binascii
import os
import struct
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from waypoint.errors import ContentError
from waypoint.protocol import DocumentBlock, ImageBlock, RichBlock, SearchResultBlock, TextBlock

IMAGE_MAX_BASE64 = 5 * 1024 * 1024
"""The API rejects an image whose base64 string is longer than this."""
IMAGE_MAX_SIDE = 8000
"""The API rejects an image wider or taller than this (in pixels)."""
DOCUMENT_MAX_BASE64 = 32 * 1024 * 1024
"""The API's limit on a whole request: no larger document can be sent."""

ImageType = Literal["image/jpeg", "image/png", "image/gif", "image/webp"]
DocumentType = Literal["application/pdf", "text/plain"]
Source = str | os.PathLike[str] | bytes
"""A file path, or the raw bytes themselves."""


def image(source: Source, media_type: ImageType | None = None) -> ImageBlock:
    """An image block from a file or bytes; its type is read from the bytes.

    Raises:
        ContentError: Not a PNG, JPEG, GIF or WEBP (or not the `media_type` given), over
            5 MiB base64-encoded or 8000 px on a side, or the file cannot be read.
    """
    return _image(*_read(source), media_type)


def document(
    source: Source, title: str | None = None, *, citations: bool = False, context: str | None = None
) -> DocumentBlock:
    """A document block from a PDF or UTF-8 text; a file's name is its title unless given.

    `citations=True` lets Claude cite its passages; `context` is said about it, not cited.

    Raises:
        ContentError: Neither a PDF nor UTF-8 text, over 32 MiB base64-encoded, or the file
            cannot be read.
    """
    if title is None and not isinstance(source, bytes):
        title = Path(source).name
    block = _document(*_read(source), title)
    return block.model_copy(update={"citations": citations, "context": context or None})


def search_result(
    source: str, title: str, content: str | Sequence[str], *, citations: bool = True
) -> SearchResultBlock:
    """A search result your tool found (a RAG lookup): Claude cites it as it would the web.

    `source` is its URL or any identifier; `content` its text, in one or more passages.

    Raises:
        ContentError: An empty source, title or passage (the API refuses them).
    """
    passages = [content] if isinstance(content, str) else list(content)
    block = SearchResultBlock(
        source=source,
        title=title,
        content=[TextBlock(text=p) for p in passages],
        citations=citations,
    )
    check(block)
    return block


def attachment(source: Source) -> ImageBlock | DocumentBlock:
    """An image or a document, whichever the bytes are (what `waypoint start --attach` sends).

    Raises:
        ContentError: The file cannot be read, is of no type Claude reads, or is too big.
    """
    data, name = _read(source)
    if _image_type(data) is not None:
        return _image(data, name)
    if _document_type(data) is not None:
        return _document(data, name, None if isinstance(source, bytes) else Path(source).name)
    raise ContentError(
        f"{name}: unknown file type; attach a PNG, JPEG, GIF or WEBP image, a PDF or UTF-8 text"
    )


def check(block: RichBlock, name: str = "content block") -> None:
    """Check a block built by hand as `image`/`document` would (type by magic bytes, limits).

    Raises:
        ContentError: The data is not base64, does not match its media type, or is too big.
    """
    if isinstance(block, TextBlock):
        if not block.text:
            raise ContentError(f"{name}: a text block must not be empty (the API refuses it)")
        return
    if isinstance(block, SearchResultBlock):
        if not (block.source and block.title and block.content):
            raise ContentError(f"{name}: a search result needs a source, a title and content")
        for i, passage in enumerate(block.content):
            check(passage, f"{name}, passage {i}")
        return
    try:
        data = base64.b64decode(block.data, validate=True)
    except binascii.Error as err:
        raise ContentError(f"{name}: its data is not valid base64 ({err})") from None
    if isinstance(block, ImageBlock):
        if _image_type(data) != block.media_type:
            raise ContentError(f"{name}: its bytes are not {block.media_type}")
        _check_image(data, block, name)
        return
    if _document_type(data) != block.media_type:
        raise ContentError(f"{name}: its bytes are not {block.media_type}")
    _check_size(block, DOCUMENT_MAX_BASE64, name)


def _image(data: bytes, name: str, media_type: ImageType | None = None) -> ImageBlock:
    detected = _image_type(data)
    if detected is None:
        raise ContentError(f"{name} is not a PNG, JPEG, GIF or WEBP image")
    if media_type is not None and media_type != detected:
        raise ContentError(f"{name} is {detected}, not {media_type}")
    block = ImageBlock(media_type=detected, data=_b64(data))
    _check_image(data, block, name)
    return block


def _document(data: bytes, name: str, title: str | None) -> DocumentBlock:
    media_type = _document_type(data)
    if media_type is None:
        raise ContentError(f"{name} is neither a PDF nor UTF-8 text")
    block = DocumentBlock(media_type=media_type, data=_b64(data), title=title)
    _check_size(block, DOCUMENT_MAX_BASE64, name)
    return block


def _read(source: Source) -> tuple[bytes, str]:
    """The bytes and a name to put in errors."""
    if isinstance(source, bytes):
        return source, f"data ({len(source):,} bytes)"
    path = Path(source)
    try:
        return path.read_bytes(), str(path)
    except FileNotFoundError:
        raise ContentError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise ContentError(f"{path}: is a directory, not a file") from None
    except OSError as err:
        raise ContentError(f"{path}: cannot read it ({err.strerror or err})") from None


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _image_type(data: bytes) -> ImageType | None:
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def _document_type(data: bytes) -> DocumentType | None:
    if data.startswith(b"%PDF-"):
        return "application/pdf"
    if not data or b"\x00" in data:
        return None
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return "text/plain"


def _check_size(block: ImageBlock | DocumentBlock, limit: int, name: str) -> None:
    if len(block.data) > limit:
        kind = "an image" if block.type == "image" else "a document"
        raise ContentError(
            f"{name} is {len(block.data) / 2**20:.1f} MiB base64-encoded; the API accepts at "
            f"most {limit / 2**20:g} MiB for {kind}"
        )


def _check_image(data: bytes, block: ImageBlock, name: str) -> None:
    _check_size(block, IMAGE_MAX_BASE64, name)
    size = image_size(data)
    if size is not None and max(size) > IMAGE_MAX_SIDE:
        raise ContentError(
            f"{name} is {size[0]}x{size[1]} px; the API accepts at most "
            f"{IMAGE_MAX_SIDE}x{IMAGE_MAX_SIDE}"
        )


def image_size(data: bytes) -> tuple[int, int] | None:
    """Width and height from the image's header, or None if the header is not understood."""
    try:
        kind = _image_type(data)
        if kind == "image/png":
            return struct.unpack(">II", data[16:24])
        if kind == "image/gif":
            return struct.unpack("<HH", data[6:10])
        if kind == "image/webp":
            return _webp_size(data)
        if kind == "image/jpeg":
            return _jpeg_size(data)
    except struct.error:
        return None
    return None


def _webp_size(data: bytes) -> tuple[int, int] | None:
    chunk = data[12:16]
    if chunk == b"VP8X":
        w, h = int.from_bytes(data[24:27], "little"), int.from_bytes(data[27:30], "little")
        return w + 1, h + 1
    if chunk == b"VP8L":
        bits = int.from_bytes(data[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if chunk == b"VP8 ":
        w, h = struct.unpack("<HH", data[26:30])
        return w & 0x3FFF, h & 0x3FFF
    return None


_JPEG_FRAMES = set(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
"""Start-of-frame markers (SOF0..SOF15 minus DHT, JPG and DAC), which carry the size."""


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    i = 2
    while i + 9 < len(data):
        if data[i] != 0xFF:
            return None
        marker = data[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        if marker in _JPEG_FRAMES:
            h, w = struct.unpack(">HH", data[i + 5 : i + 9])
            return w, h
        i += 2 + struct.unpack(">H", data[i + 2 : i + 4])[0]
    return None
