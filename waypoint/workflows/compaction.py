"""What a compaction sends the summariser: the older transcript as plain text, and why.

Deterministic code only: the rendering is part of the summary step's input.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from waypoint.protocol import (
        DocumentBlock,
        ImageBlock,
        Message,
        TextBlock,
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
    text = "\n".join(lines)
    if len(text) > budget_chars:
        half = budget_chars // 2
        text = f"{text[:half]}\n[... {len(text) - 2 * half} characters elided ...]\n{text[-half:]}"
    return text
