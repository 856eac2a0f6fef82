"""Tools whose schema Anthropic defines (bash, text editor, memory) run through our funnel (30.6).

The request names such a tool by its type, with no schema; its calls run on the worker like any
tool's: validated, classified, approved if the policy says so, on the ledger, with an effect key.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Literal

import pytest
from pydantic import BaseModel
from temporalio.client import Client

from tests.conftest import Claude, running_worker
from tests.fake_messages_api import FakeMessagesAPI, text, tool_use
from waypoint import Agent, ToolContext, tool
from waypoint.client.runs import start_run
from waypoint.errors import ToolDefinitionError


class MemoryCommand(BaseModel):
    """What Claude sends the memory tool (the commands this example keeps)."""

    command: Literal["view", "create"]
    path: str
    file_text: str | None = None


def memory_tool(db: Path):  # noqa: ANN201 - a Tool
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS files (path TEXT, body TEXT, effect_key TEXT)")

    @tool("effect", idempotent=True, anthropic_type="memory_20250818")
    async def memory(args: MemoryCommand, ctx: ToolContext) -> str:
        """Claude's memory: files that outlive the run."""
        with sqlite3.connect(db) as conn:
            if args.command == "create":
                conn.execute(
                    "INSERT INTO files SELECT ?, ?, ? WHERE NOT EXISTS "
                    "(SELECT 1 FROM files WHERE effect_key = ?)",
                    (args.path, args.file_text, ctx.effect_key, ctx.effect_key),
                )
                return f"created {args.path}"
            row = conn.execute("SELECT body FROM files WHERE path = ?", (args.path,)).fetchone()
            return row[0] if row else f"no file {args.path}"

    return memory


async def test_the_memory_tool_is_named_by_type_and_its_calls_pass_the_funnel(
    client: Client, task_queue: str, tmp_path: Path, api: FakeMessagesAPI, claude: Claude
) -> None:
    db = tmp_path / "memory.db"
    agent = Agent(
        name="rememberer",
        model="claude-sonnet-4-6",
        system="Remember.",
        tools=[memory_tool(db)],
    )
    note = {"command": "create", "path": "/memories/ada.md", "file_text": "Ada pays on Fridays."}
    api.enqueue_message(tool_use("memory", note))
    api.enqueue_message(tool_use("memory", {"command": "delete"}))  # not what the model allows
    api.enqueue_message(text("Remembered."))
    async with running_worker(client, [agent], task_queue, claude=claude(api)):
        handle = await start_run(client, "rememberer", "remember ada", task_queue=task_queue)
        result = await handle.result()
    assert result.output == "Remembered."
    (declared,) = api.message_requests[0].body["tools"]
    declared.pop("cache_control", None)
    assert declared == {"type": "memory_20250818", "name": "memory"}
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT path, body, effect_key FROM files").fetchall()
    (step,) = [r for r in result.ledger if r.step_id == "t1.tool.1.memory"]
    assert rows == [("/memories/ada.md", "Ada pays on Fridays.", step.effect_key)]
    refused = api.message_requests[2].body["messages"][-1]["content"][0]
    assert refused["is_error"] and "Invalid arguments for memory" in str(refused["content"])


def test_an_anthropic_tool_must_have_the_name_anthropic_gives_it() -> None:
    with pytest.raises(ToolDefinitionError, match="must be named 'str_replace_based_edit_tool'"):

        @tool("effect", idempotent=True, anthropic_type="text_editor_20250728")
        async def editor(args: MemoryCommand) -> str:
            """Edit."""
            return ""
