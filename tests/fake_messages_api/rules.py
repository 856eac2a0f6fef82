"""Rules the real API enforces on a request before it answers, each a 400 with its message.

Thinking: with `thinking` enabled or adaptive, a request that answers tool calls continues an
assistant turn, and that turn must open with its thinking or redacted_thinking block. A
tool-use loop is one assistant turn (Anthropic's "Toggling thinking modes in conversations"):
it starts at the first assistant message after the last user message that answers no tool
call, and runs through every tool_result since. Replies within the loop need no thinking of
their own: without interleaved thinking Claude writes none after a tool result, and adaptive
thinking may write none. Every thinking block sent back must carry the signature this server
issued for exactly that text, and every redacted_thinking block data it issued (checked
whether or not thinking is on: a tampered block is a client bug either way).

Vertex AI: the body names `anthropic_version` (the model is in the path).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from typing import Any

from tests.fake_messages_api.prompt import PromptError

THINKING_DOCS = "https://docs.claude.com/en/docs/build-with-claude/extended-thinking"


class Signer:
    """Issues and checks thinking signatures and redacted_thinking data, keyed per server."""

    def __init__(self) -> None:
        self._key = secrets.token_bytes(32)

    def sign(self, thinking: str) -> str:
        """The signature this server gives a thinking block with this text."""
        mac = hmac.new(self._key, b"thinking\x00" + thinking.encode(), hashlib.sha256)
        return base64.b64encode(b"sig" + mac.digest()).decode()

    def redacted(self) -> str:
        """Fresh opaque data for a redacted_thinking block."""
        nonce = secrets.token_bytes(24)
        mac = hmac.new(self._key, b"redacted\x00" + nonce, hashlib.sha256).digest()
        return base64.b64encode(nonce + mac).decode()

    def check_signature(self, thinking: str, signature: Any) -> bool:
        """Whether `signature` is the one issued for `thinking`."""
        return isinstance(signature, str) and hmac.compare_digest(
            signature.encode(), self.sign(thinking).encode()
        )

    def check_redacted(self, data: Any) -> bool:
        """Whether `data` was issued by this server, unchanged."""
        try:
            raw = base64.b64decode(data, validate=True)
        except (TypeError, ValueError):
            return False
        nonce, mac = raw[:24], raw[24:]
        expected = hmac.new(self._key, b"redacted\x00" + nonce, hashlib.sha256).digest()
        return len(raw) == 56 and hmac.compare_digest(mac, expected)


def thinking_on(body: dict[str, Any]) -> bool:
    """Whether the request asks for thinking (enabled or adaptive)."""
    config = body.get("thinking")
    return isinstance(config, dict) and config.get("type") in ("enabled", "adaptive")


def check(body: dict[str, Any], signer: Signer) -> None:
    """Raise `PromptError` with the real API's message when a thinking rule is broken."""
    _check_citable(body.get("messages") or [])
    _check_signatures(body, signer)
    if not thinking_on(body):
        return
    config = body["thinking"]
    if config["type"] == "enabled":
        budget = config.get("budget_tokens")
        if not isinstance(budget, int) or budget < 1024:
            raise PromptError(
                "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024"
            )
        if budget >= body.get("max_tokens", 0):
            raise PromptError(
                "`max_tokens` must be greater than `thinking.budget_tokens`. Please consult our "
                f"documentation at {THINKING_DOCS}#max-tokens-and-context-window-size"
            )
    choice = body.get("tool_choice")
    if isinstance(choice, dict) and choice.get("type") in ("any", "tool"):
        raise PromptError("Thinking may not be enabled when tool_choice forces tool use.")
    _check_last_tool_turn(body.get("messages") or [])


def check_vertex(body: dict[str, Any]) -> None:
    """Vertex AI takes the API version in the body, not a header; without it, a 400."""
    # Not checked against the real API: the wording, and which versions Vertex accepts.
    if not isinstance(body.get("anthropic_version"), str):
        raise PromptError("anthropic_version: Field required")


def _answers_tools(message: dict[str, Any]) -> bool:
    content = message.get("content")
    return isinstance(content, list) and any(b.get("type") == "tool_result" for b in content)


def _check_last_tool_turn(messages: list[dict[str, Any]]) -> None:
    """The assistant turn the request continues opens with thinking (its first message)."""
    if not messages or messages[-1].get("role") != "user" or not _answers_tools(messages[-1]):
        return
    start = max(
        (i for i, m in enumerate(messages) if m.get("role") == "user" and not _answers_tools(m)),
        default=-1,
    )
    index = next(
        (i for i in range(start + 1, len(messages)) if messages[i].get("role") == "assistant"),
        -1,
    )
    if index < 0:
        return
    content = messages[index].get("content")
    first = content[0].get("type") if isinstance(content, list) and content else "text"
    if first not in ("thinking", "redacted_thinking"):
        raise PromptError(
            f"messages.{index}.content.0.type: Expected `thinking` or `redacted_thinking`, but "
            f"found `{first}`. When `thinking` is enabled, a final `assistant` message must "
            "start with a thinking block (preceeding the lastmost set of `tool_use` and "
            "`tool_result` blocks). We recommend you include thinking blocks from previous "
            "turns. To avoid this requirement, disable `thinking`. Please consult our "
            f"documentation at {THINKING_DOCS}"
        )


def _check_signatures(body: dict[str, Any], signer: Signer) -> None:
    for i, message in enumerate(body.get("messages") or []):
        content = message.get("content")
        if message.get("role") != "assistant" or not isinstance(content, list):
            continue
        for j, block in enumerate(content):
            kind = block.get("type")
            if kind == "thinking" and not signer.check_signature(
                block.get("thinking", ""), block.get("signature")
            ):
                raise PromptError(
                    f"messages.{i}.content.{j}: Invalid `signature` in `thinking` block"
                )
            if kind == "redacted_thinking" and not signer.check_redacted(block.get("data")):
                raise PromptError(
                    f"messages.{i}.content.{j}: Invalid `data` in `redacted_thinking` block"
                )


def _check_citable(messages: list[dict[str, Any]]) -> None:
    """Search results and documents as the API documents them, at the top or in a tool result.

    A search result holds a `source`, a `title` and text blocks; citations on either are
    `{"enabled": bool}`. The wording is modelled on the API's validation errors, not checked.
    """
    for m, message in enumerate(messages):
        content = message.get("content")
        for b, block in enumerate(content if isinstance(content, list) else []):
            inner = block.get("content") if block.get("type") == "tool_result" else None
            nested = inner if isinstance(inner, list) else []
            for where, part in [(f"messages.{m}.content.{b}", block)] + [
                (f"messages.{m}.content.{b}.content.{i}", p) for i, p in enumerate(nested)
            ]:
                _check_one_citable(where, part)


def _check_one_citable(where: str, block: dict[str, Any]) -> None:
    kind = block.get("type")
    if kind not in ("search_result", "document"):
        return
    citations = block.get("citations")
    if citations is not None and not (
        isinstance(citations, dict) and isinstance(citations.get("enabled"), bool)
    ):
        raise PromptError(f"{where}.citations.enabled: Field required")
    if kind == "document":
        return
    for field in ("source", "title"):
        if not isinstance(block.get(field), str) or not block[field]:
            raise PromptError(f"{where}.{field}: Field required")
    texts = block.get("content")
    if not isinstance(texts, list) or not texts:
        raise PromptError(f"{where}.content: Field required")
    for i, text in enumerate(texts):
        if text.get("type") != "text" or not text.get("text"):
            raise PromptError(f"{where}.content.{i}: Input should be a text block")
