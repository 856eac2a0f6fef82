"""What a compaction folds and what it keeps, and what it sends the summariser.

Deterministic code only: the cut and the rendering are part of the summary step's input.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from waypoint.protocol import (
        DocumentBlock,
        ImageBlock,
        Message,
        RedactedThinkingBlock,
        SearchResultBlock,
        TextBlock,
        ThinkingBlock,
        ToolResultBlock,
        ToolUseBlock,
        text_of,
    )
    from waypoint.protocol.hashing import canonical_json

COMPACT_CHARS_PER_TOKEN = 3
"""What a summary request renders at most, in characters per token of the context window."""
MIN_COMPACT_CHARS = 1_000
"""A summary request too long for the model is halved while it stays above this, then parks."""

COMPACT_SYSTEM = (
    "You compact an agent's working memory. Summarise the conversation below for the agent "
    "that will continue it: the task, every fact it established (ids, numbers, names exactly), "
    "every action it took in the outside world and its result, and what remains to do. "
    "Do not call tools. Answer with the summary only."
)


def usual_cut(messages: list[Message], keep_turns: int) -> int:
    """Where the verbatim tail starts: at an assistant reply that follows a user message."""
    cut = len(messages) - 2 * keep_turns
    while cut > 1 and not _starts_reply(messages, cut):
        cut -= 1
    return cut


def opens_with_thinking(message: Message) -> bool:
    """The reply starts with a thinking or redacted_thinking block."""
    first = message.content[0] if message.content else None
    return isinstance(first, ThinkingBlock | RedactedThinkingBlock)


def thinking_cut(messages: list[Message], cut: int) -> int:
    """The first reply from `cut` on that opens with its thinking; past the end if none does.

    With thinking on, the summary (a user message) makes the tail's first reply the start of
    the assistant turn the next request continues, and the API wants that turn to open with
    thinking. A reply written after a tool result has none without interleaved thinking (and
    may have none with adaptive thinking), so the tail starts at the next reply that does, or
    is empty: the next request is the summary alone, and Claude thinks afresh.
    """
    return next(
        (
            i
            for i in range(cut, len(messages))
            if _starts_reply(messages, i) and opens_with_thinking(messages[i])
        ),
        len(messages),
    )


def _starts_reply(messages: list[Message], i: int) -> bool:
    return messages[i].role == "assistant" and messages[i - 1].role != "assistant"


def render_transcript(messages: list[Message], budget_chars: int) -> str:
    """The older transcript as plain text, so the summariser needs no tool definitions.

    Thinking is left out; beyond `budget_chars` the middle is elided so the summary call fits.
    """
    lines = []
    for message in messages:
        for block in message.content:
            if isinstance(block, TextBlock):
                lines.append(f"{message.role}: {block.text}")
            elif isinstance(block, ToolUseBlock):
                lines.append(f"tool call {block.name} {canonical_json(block.input)}")
            elif isinstance(block, ToolResultBlock):
                flag = " (error)" if block.is_error else ""
                lines.append(f"tool result{flag}: {text_of(block.content)}")
            elif isinstance(block, ImageBlock | DocumentBlock):
                lines.append(f"{message.role}: [{block.type} {block.media_type}]")
            elif isinstance(block, SearchResultBlock):
                lines.append(f"{message.role}: {text_of([block])}")
    text = "\n".join(lines)
    if len(text) > budget_chars:
        half = budget_chars // 2
        text = f"{text[:half]}\n[... {len(text) - 2 * half} characters elided ...]\n{text[-half:]}"
    return text


def tail_cut(messages: list[Message], keep_turns: int, *, thinking: bool) -> int:
    """Where the verbatim tail starts; with thinking on, at a reply that opens with it."""
    cut = usual_cut(messages, keep_turns)
    if cut > 1 and thinking and not opens_with_thinking(messages[cut]):
        return thinking_cut(messages, cut)
    return cut
