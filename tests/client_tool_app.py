"""An agent that asks its requester a question (`--app tests.client_tool_app:agents`)."""

from __future__ import annotations

import os
import sqlite3
from datetime import timedelta
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

from waypoint._agent import Agent
from waypoint._client_tools import client_tool
from waypoint._tools import ToolContext, tool
from waypoint.protocol import Escalation, ModelRequest, ModelResponse
from waypoint.testing import last_tool_results, reply, text, tool_use


class Question(BaseModel):
    """Ask the requester a question; they answer with one of the choices."""

    question: str
    choices: list[str]


class Choice(BaseModel):
    choice: Literal["red", "blue"]
    note: str = ""


def _answered(request: ModelRequest) -> ModelResponse:
    (result,) = last_tool_results(request)
    prefix = "No answer" if result.is_error else "User said"
    return reply(text(f"{prefix}: {result.content}"))


SCRIPT = [
    reply(tool_use("ask_user", question="Which colour?", choices=["red", "blue"])),
    _answered,
]


def notifications(path: Path) -> list[tuple[str, int]]:
    """The reminders sent, by effect key (one row each however often a step ran)."""
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE IF NOT EXISTS notes (effect_key TEXT PRIMARY KEY, reminder INT)")
        return db.execute("SELECT effect_key, reminder FROM notes ORDER BY reminder").fetchall()


def asker(
    notes: Path, *, timeout: timedelta | None = None, remind_every: timedelta | None = None
) -> Agent:
    """The agent; reminders go into the SQLite file `notes`."""
    notifications(notes)

    @tool("effect", idempotent=True)
    async def remind_user(args: Escalation, ctx: ToolContext) -> str:
        """Remind the requester a question waits for them."""
        with sqlite3.connect(notes) as db:
            db.execute("INSERT OR IGNORE INTO notes VALUES (?, ?)", (ctx.effect_key, args.reminder))
        return f"reminded about {args.step_id} after {args.waited_seconds:.1f}s"

    ask_user = client_tool(
        "ask_user",
        Question,
        Choice,
        timeout=timeout,
        remind_every=remind_every,
        escalate_with="remind_user" if remind_every else None,
    )
    return Agent(
        name="asker",
        model="claude-sonnet-4-6",
        system="Ask before you choose.",
        tools=[ask_user, remind_user],
        script=SCRIPT,
    )


def agents() -> list[Agent]:
    """The asker, reminding into the SQLite file named by WAYPOINT_TEST_NOTES."""
    return [asker(Path(os.environ["WAYPOINT_TEST_NOTES"]))]
