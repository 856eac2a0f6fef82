"""What a model step's reply holds for a reader: words, searches, citations, tool calls.

Its server-tool searches come with the sources each found; its tool calls with their
arguments, by the tool step's id.

Pure reading of a recorded `ModelResponse`: `waypoint.client.evidence` calls it for each
model step it reads back.
"""

from __future__ import annotations

import json
import re

from pydantic import BaseModel

from waypoint.protocol import ModelResponse
from waypoint.protocol.messages import ServerBlock, TextBlock, ToolUseBlock

MODEL_STEP = re.compile(r"^t(?P<turn>\d+)\.model$")
"""A turn's model step; its tool calls are that turn's tool steps, numbered in order."""


class Search(BaseModel):
    """One of Claude's server-tool calls in a reply: what it asked, what it found."""

    tool: str
    query: str
    sources: list[dict[str, str]] = []
    """Each result's `title` and `url`, as the API gave them."""


class Said(BaseModel):
    """A model step's words, searches and citations."""

    words: str = ""
    searches: list[Search] = []
    citations: list[dict[str, str]] = []
    """Each cited source: `title`, `url`, `cited_text`."""


def said(response: ModelResponse) -> Said:
    """What a reply said, searched (with the sources each search found) and cited."""
    words, searches, citations = [], {}, []
    for block in response.content:
        if isinstance(block, TextBlock):
            words.append(block.text)
            for cited in block.citations or []:
                citations.append({k: str(cited.get(k, "")) for k in ("title", "url", "cited_text")})
        elif isinstance(block, ServerBlock) and block.type == "server_tool_use":
            given = block.block.get("input") or {}
            asked = given.get("query") or given.get("url") or json.dumps(given)
            name = str(block.block.get("name", "server tool"))
            searches[block.block.get("id")] = Search(tool=name, query=str(asked))
        elif isinstance(block, ServerBlock) and block.type.endswith("_tool_result"):
            search = searches.get(block.block.get("tool_use_id"))
            found = block.block.get("content")
            if search is not None and isinstance(found, list):
                search.sources = [
                    {"title": str(r.get("title", "")), "url": str(r.get("url", ""))}
                    for r in found
                    if isinstance(r, dict) and r.get("url")
                ]
    return Said(words="".join(words), searches=list(searches.values()), citations=citations)


def calls(step_id: str, response: ModelResponse) -> dict[str, dict]:
    """The arguments of each tool call a model step made, by the tool step's id.

    What the model asked for, before the run validated it: a step run as a local activity
    (`durability="turn"`) records its result but not its arguments, so this is their record.
    """
    turn = MODEL_STEP.match(step_id)
    if turn is None:
        return {}
    uses = [b for b in response.content if isinstance(b, ToolUseBlock)]
    return {f"t{turn['turn']}.tool.{i}.{use.name}": use.input for i, use in enumerate(uses, 1)}
