"""Reading a `ModelRequest` in a script entry: a tool's latest result, a sub-agent's task.

A script entry that is a function gets the request the model would read: the system prompt,
the tools, and `messages`, the transcript so far (user messages hold the tool results, the
assistant's hold the `ToolUseBlock`s they answer). These find what a script usually reacts to.
"""

from __future__ import annotations

import json
import re
from typing import Any, TypeVar

from pydantic import BaseModel

from waypoint.protocol import ModelRequest, TextBlock, ToolResultBlock, ToolUseBlock, text_of

T = TypeVar("T", bound=BaseModel)


def latest_result(request: ModelRequest, tool: str) -> ToolResultBlock | None:
    """The newest result of a call to `tool` in the transcript; None if it has none yet.

    Matched to its call by tool-use id, so it finds a result from any earlier turn, and a
    rejected, denied or refused call's result too (`is_error`, its text saying why).
    """
    names = {
        block.id: block.name
        for message in request.messages
        if message.role == "assistant"
        for block in message.content
        if isinstance(block, ToolUseBlock)
    }
    for message in reversed(request.messages):
        for block in reversed(message.content):
            if isinstance(block, ToolResultBlock) and names.get(block.tool_use_id) == tool:
                return block
    return None


def result_json(block: ToolResultBlock | None) -> Any:
    """A result's JSON (what a tool returning a model or a dict gave), else None.

    None too for an error result (a rejection, a failure) or text that is not JSON.
    """
    if block is None or block.is_error:
        return None
    try:
        return json.loads(text_of(block.content))
    except ValueError:
        return None


_UNTIL = (
    r"(?=; [\w.-]+\(.*?\) (?:read again|was not read again|could not be read)|\. Decide again|$)"
)


def read_again(request: ModelRequest, tool: str) -> str | None:
    """The newest text a refresh of `tool` returned when it had changed; None if none did.

    A `fresh_for` read found stale is read again before an effect or a model step. What
    changed reaches the model in a refused effect's result or in a note, not as a new result
    of the read (`latest_result` still holds the first): "fares({...}) read again now
    returns: TEXT".
    """
    found = re.compile(re.escape(tool) + r"\(.*?\) read again now returns: (.*?)" + _UNTIL, re.S)
    for message in reversed(request.messages):
        for block in reversed(message.content if message.role == "user" else []):
            said = block.text if isinstance(block, TextBlock) else ""
            if isinstance(block, ToolResultBlock):
                said = text_of(block.content)
            if hits := found.findall(said):
                return hits[-1]
    return None


def notes(request: ModelRequest) -> list[str]:
    """The text the last user message carries besides its tool results.

    A refresh's note that a read changed ("... read again now returns: ..."), a steer, a
    fork's note.
    """
    if not request.messages or request.messages[-1].role != "user":
        return []
    return [b.text for b in request.messages[-1].content if isinstance(b, TextBlock)]


def task_as(request: ModelRequest, input_type: type[T]) -> T:
    """A sub-agent's task as its `input_type`: the parent's validated call, sent as JSON.

    Raises:
        ValueError: The first message is not such JSON (not a sub-agent's run of that type).
    """
    first = request.messages[0] if request.messages else None
    said = [b.text for b in first.content if isinstance(b, TextBlock)] if first else []
    if not said:
        raise ValueError("the request has no task text: is this a sub-agent's first message?")
    return input_type.model_validate_json(said[0])
