"""The scripted model: plays an agent's script, one reply per turn; labelled `scripted`.

A deterministic stand-in for Claude, for offline demos and tests; the script helpers
(`reply`, `text`, `tool_use`, `final_answer`) are in `waypoint.testing`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

from waypoint._providers import live, spend
from waypoint._providers.scripts import SCRIPTED_MODEL_ID, Script, reply, text
from waypoint.protocol import (
    ContentBlock,
    DocumentBlock,
    ImageBlock,
    ModelRequest,
    ModelResponse,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
)

IMAGE_MAX_TOKENS = 1600
"""The API scales a large image down to about this many tokens."""


def _chars(block: Any) -> int:
    """Characters of text, or their equivalent (four a token) for images and documents.

    Images and documents are estimated from their size without decoding them: an image at
    one token per 750 bytes, at most `IMAGE_MAX_TOKENS`; a PDF at one token per 50 bytes (a
    page of text and its picture); plain text at four bytes a token, like any text.
    """
    if isinstance(block, TextBlock):
        return len(block.text)
    if isinstance(block, ToolResultBlock):
        if isinstance(block.content, str):
            return len(block.content)
        return sum(_chars(b) for b in block.content)
    if isinstance(block, ToolUseBlock):
        return len(block.name) + 8 * len(block.input)
    if isinstance(block, ImageBlock):
        return 4 * min(IMAGE_MAX_TOKENS, _raw_bytes(block.data) // 750 + 1)
    if isinstance(block, DocumentBlock):
        raw = _raw_bytes(block.data)
        return raw if block.media_type == "text/plain" else 4 * (raw // 50 + 1)
    return sum(_chars(b) for b in getattr(block, "content", ()))


def _split(words: str, n: int) -> list[str]:
    """`words` in about `n` pieces."""
    size = max(1, -(-len(words) // n))
    return [words[i : i + size] for i in range(0, len(words), size)]


def _raw_bytes(data: str) -> int:
    """Decoded size of base64 data, without decoding it."""
    return len(data) * 3 // 4


def _estimate_tokens(blocks: Sequence[Any]) -> int:
    """About four characters a token; cheap, since it runs on every scripted call."""
    return max(1, sum(_chars(b) for b in blocks) // 4)


def _input_tokens(request: ModelRequest) -> int:
    return _estimate_tokens(request.messages) + len(request.system) // 4


class ScriptedModel:
    """Plays each agent's script; counts its calls so tests can prove none was repeated.

    Args:
        scripts: The script of each agent, by agent name.
        latency: Seconds each reply takes, to make a demo or a kill test look like real calls.
        chunks: The reply's text is given out in this many pieces over `latency`, as Claude
            streams it (`waypoint watch` shows them arrive).
        latency_of: Seconds a reply to this request takes, when it is not `latency` for all
            (e.g. one slow step to steer or kill during).
    """

    def __init__(
        self,
        scripts: dict[str, Script],
        latency: float = 0.0,
        chunks: int = 8,
        latency_of: Callable[[ModelRequest], float] | None = None,
    ) -> None:
        self.scripts = dict(scripts)
        self.latency = latency
        self.chunks = chunks
        self.latency_of = latency_of
        self.calls: list[str] = []
        self.requests: list[ModelRequest] = []

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Answer with the script's entry for this turn."""
        self.calls.append(request.step_id)
        self.requests.append(request)
        script = self.scripts.get(request.agent, ())
        if request.purpose == "compact":
            digest = request.messages[0].content[0]
            lines = str(getattr(digest, "text", "")).count("\n") + 1
            response = reply(text(f"(scripted summary of {lines} lines of earlier work)"))
        elif request.turn > len(script):
            response = reply(text(f"(scripted model: no reply scripted for turn {request.turn})"))
        else:
            entry = script[request.turn - 1]
            response = entry(request) if callable(entry) else entry
        latency = self.latency if self.latency_of is None else self.latency_of(request)
        read = _input_tokens(request)  # once: it walks the whole transcript
        await self._write(read, response, latency)
        return self._finish(request, response, read)

    async def _write(self, read: int, response: ModelResponse, latency: float) -> None:
        """Take `latency` seconds, giving the reply's text out in `chunks` pieces meanwhile.

        What it has spent so far is reported as it goes (all known: it is its own meter).
        """
        words = "\n".join(b.text for b in response.content if isinstance(b, TextBlock))
        pieces = _split(words, self.chunks) if words and self.chunks > 1 else [words]
        written = 0
        for piece in pieces:
            spent = Usage(input_tokens=read, output_tokens=written // 4)
            spend.report(spent, known=True, cost_usd=0.0)
            if latency:
                await asyncio.sleep(latency / len(pieces))
            live.emit("text", piece)
            written += len(piece)

    @staticmethod
    def _finish(request: ModelRequest, response: ModelResponse, read: int) -> ModelResponse:
        content: list[ContentBlock] = []
        for i, block in enumerate(response.content, start=1):
            if isinstance(block, ToolUseBlock) and not block.id:
                block = block.model_copy(update={"id": f"toolu_t{request.turn}_{i}"})
            content.append(block)
        usage = Usage(input_tokens=read, output_tokens=_estimate_tokens(content))
        return response.model_copy(
            update={"content": content, "usage": usage, "cost_usd": 0.0, "model": SCRIPTED_MODEL_ID}
        )
