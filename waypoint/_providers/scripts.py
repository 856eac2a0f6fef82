"""Scripts for the scripted model, a deterministic stand-in for Claude (`waypoint.testing`).

The model plays one reply per turn from a script. Every reply it gives is labelled with the model id
`scripted` in the ledger, so nobody mistakes it for Claude. An entry may be a function of the
request, to react to what the tools returned (a rejected approval, say).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import Any

from pydantic import BaseModel

from waypoint.protocol import (
    ModelRequest,
    ModelResponse,
    ServerBlock,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from waypoint.protocol.output import FINAL_TOOL
from waypoint.protocol.vocabulary import END_TURN, TOOL_USE

ScriptEntry = ModelResponse | Callable[[ModelRequest], ModelResponse]
Script = Sequence[ScriptEntry]

SCRIPTED_MODEL_ID = "scripted"


def text(value: str) -> TextBlock:
    """A text block for a scripted reply."""
    return TextBlock(text=value)


def tool_use(name: str, /, **arguments: Any) -> ToolUseBlock:
    """A tool call for a scripted reply; its id is filled in by `reply`."""
    return ToolUseBlock(id="", name=name, input=arguments)


def final_answer(value: BaseModel | dict[str, Any]) -> ToolUseBlock:
    """A `final_answer` call for a scripted reply of an agent with an `output_type`."""
    arguments = value.model_dump(mode="json") if isinstance(value, BaseModel) else value
    return ToolUseBlock(id="", name=FINAL_TOOL, input=arguments)


def web_search(
    query: str, *results: tuple[str, str], cite: str = ""
) -> list[TextBlock | ServerBlock]:
    """A scripted web search, its results and text citing the first: blocks for `reply`.

    `results` are `(url, title)`; their content is the scripted model's own (`scripted-...`),
    so nobody mistakes it for a real search. `cite`: the text that cites the first result.
    """
    call_id = "srvtoolu_scripted_" + hashlib.sha256(query.encode()).hexdigest()[:12]
    found = [
        {"type": "web_search_result", "url": u, "title": t, "encrypted_content": "scripted"}
        for u, t in results
    ]
    blocks: list[TextBlock | ServerBlock] = [
        ServerBlock(
            type="server_tool_use",
            block={
                "type": "server_tool_use",
                "id": call_id,
                "name": "web_search",
                "input": {"query": query},
            },
        ),
        ServerBlock(
            type="web_search_tool_result",
            block={"type": "web_search_tool_result", "tool_use_id": call_id, "content": found},
        ),
    ]
    if cite and results:
        where = {"type": "web_search_result_location", "url": results[0][0], "title": results[0][1]}
        citation = where | {"encrypted_index": "scripted", "cited_text": cite}
        blocks.append(TextBlock(text=cite, citations=[citation]))
    return blocks


def reply(*blocks: TextBlock | ToolUseBlock | ServerBlock) -> ModelResponse:
    """One scripted model reply: `tool_use` if it calls tools, else `end_turn`."""
    calls = [b for b in blocks if isinstance(b, ToolUseBlock)]
    return ModelResponse(
        content=list(blocks),
        stop_reason=TOOL_USE if calls else END_TURN,
        model=SCRIPTED_MODEL_ID,
    )


def last_tool_results(request: ModelRequest) -> list[ToolResultBlock]:
    """The tool results the model is answering, for script entries that react to them.

    A result's `content` is a string, or a list of text, image and document blocks when the
    tool returned content blocks (`waypoint.protocol.text_of` gives its text either way).
    """
    if not request.messages or request.messages[-1].role != "user":
        return []
    return [b for b in request.messages[-1].content if isinstance(b, ToolResultBlock)]
