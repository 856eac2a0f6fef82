"""Messages: Waypoint's own content blocks, so history never depends on an SDK version.

Anthropic's SDK types are converted to and from these only inside the model activity.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field, Tag, model_validator

from waypoint.protocol.base import _Frozen, _unset


class TextBlock(_Frozen):
    """Text written by the model or the user."""

    type: Literal["text"] = "text"
    text: str
    citations: list[dict[str, Any]] | None = Field(default=None, exclude_if=_unset)
    """The sources the model cites for this text, as the API gave them; sent back unchanged."""


class ImageBlock(_Frozen):
    """An image for the model (a tool's result or an attachment), base64-encoded."""

    type: Literal["image"] = "image"
    media_type: Literal["image/jpeg", "image/png", "image/gif", "image/webp"]
    data: str


class DocumentBlock(_Frozen):
    """A PDF (or plain text) document for the model, base64-encoded."""

    type: Literal["document"] = "document"
    media_type: Literal["application/pdf", "text/plain"] = "application/pdf"
    data: str
    title: str | None = Field(default=None, exclude_if=_unset)
    context: str | None = Field(default=None, exclude_if=_unset)
    """What the model should know about the document that is not to be cited from it."""
    citations: bool = Field(default=False, exclude_if=_unset)
    """Let the model cite passages of it (`char_location` or `page_location` citations)."""


class SearchResultBlock(_Frozen):
    """A search result a tool found: the model cites it as it would a web search's.

    Its citations come back as `search_result_location` on the reply's text (kept as given).
    """

    type: Literal["search_result"] = "search_result"
    source: str
    """The result's URL or other identifier."""
    title: str
    content: list[TextBlock]
    citations: bool = True


RichBlock = Annotated[
    TextBlock | ImageBlock | DocumentBlock | SearchResultBlock, Field(discriminator="type")
]
"""What a tool may return, and what a task may carry, beyond plain text."""


class ThinkingBlock(_Frozen):
    """Claude's thinking, kept verbatim: the API needs it back, signature included."""

    type: Literal["thinking"] = "thinking"
    thinking: str
    signature: str


class RedactedThinkingBlock(_Frozen):
    """Thinking the API encrypted; sent back byte for byte, never shown."""

    type: Literal["redacted_thinking"] = "redacted_thinking"
    data: str


class ToolUseBlock(_Frozen):
    """A tool call the model asked for."""

    type: Literal["tool_use"] = "tool_use"
    id: str
    name: str
    input: dict[str, Any]
    invalid: str | None = Field(default=None, exclude_if=_unset)
    """Why this call must not run (its input was cut off, or was not a JSON object); it gets
    an error result instead. Never sent to the API."""
    caller: dict[str, Any] | None = Field(default=None, exclude_if=_unset)
    """Who made the call, as the API said: code execution calling the agent's tool
    (programmatic tool calling). The call passes the same funnel; this is sent back as it came."""


class ToolResultBlock(_Frozen):
    """The answer to one tool call, sent back to the model."""

    type: Literal["tool_result"] = "tool_result"
    tool_use_id: str
    content: str | list[RichBlock]
    is_error: bool = False


class ServerBlock(_Frozen):
    """A block the API made and reads back, kept as it came: a server tool's call or result.

    `server_tool_use`, `web_search_tool_result`, `code_execution_tool_result`,
    `container_upload`, ... and any type a later API version adds: history holds the block as
    the API sent it, and the next request sends it back unchanged (the API refuses a turn whose
    server tool blocks are missing or altered).
    """

    type: str
    block: dict[str, Any]
    """The whole block, `type` included, as the API sent it."""

    @model_validator(mode="after")
    def _same_type(self) -> ServerBlock:
        if self.block.get("type") != self.type or self.type in _OURS:
            raise ValueError(f"a server block of type {self.type!r} must hold a block of it")
        return self


_OURS = {
    "text",
    "tool_use",
    "tool_result",
    "thinking",
    "redacted_thinking",
    "image",
    "document",
    "search_result",
}


def _kind(value: object) -> str:
    """The union member a block is: its own type, or `server` for any other."""
    kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    return kind if kind in _OURS else "server"


ContentBlock = Annotated[
    Annotated[TextBlock, Tag("text")]
    | Annotated[ToolUseBlock, Tag("tool_use")]
    | Annotated[ToolResultBlock, Tag("tool_result")]
    | Annotated[ThinkingBlock, Tag("thinking")]
    | Annotated[RedactedThinkingBlock, Tag("redacted_thinking")]
    | Annotated[ImageBlock, Tag("image")]
    | Annotated[DocumentBlock, Tag("document")]
    | Annotated[SearchResultBlock, Tag("search_result")]
    | Annotated[ServerBlock, Tag("server")],
    Discriminator(_kind),
]


class Message(_Frozen):
    """One turn of the conversation."""

    role: Literal["user", "assistant"]
    content: list[ContentBlock]


def calls_of(content: list[ContentBlock]) -> list[str]:
    """The tools a reply called, by name, Claude's server tools marked as such."""
    names: list[str] = []
    for block in content:
        if isinstance(block, ToolUseBlock):
            names.append(block.name)
        elif isinstance(block, ServerBlock) and block.type == "server_tool_use":
            names.append(f"{block.block.get('name', '?')} (server)")
    return names


def text_of(content: str | list[RichBlock] | list[ContentBlock]) -> str:
    """The plain text of a result or reply (images and documents named, thinking left out)."""
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for block in content:
        if isinstance(block, TextBlock):
            parts.append(block.text)
        elif isinstance(block, ImageBlock | DocumentBlock):
            parts.append(f"[{block.type} {block.media_type}]")
        elif isinstance(block, SearchResultBlock):
            parts.append(f"[search_result {block.title} ({block.source})]")
            parts.extend(b.text for b in block.content)
    return "\n".join(parts)
