"""Small agents a user might write, for the harness tests (`--app tests.harness_app:agents`).

`asker` asks its requester (a client-answered tool) and then notes the answer (an effect);
`delegator` hands the note to a sub-agent, `helper`, so the effect's key lies under the
delegator's step key; `cold_reader` reads once slowly (a cold start longer than the harness's
2 s tool timeout), then fast. Every note is one row in a SQLite table that counts exact keys,
as most downstream systems do; `count_effects` is the `--count-effects` function. Everything
lives in `$HARNESS_DIR`: the table, the cold start's marker, and the `hold` file that keeps a
note waiting (it touches `holding` first, so a test knows the note has started).
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

from waypoint._agent import Agent
from waypoint._client_tools import client_tool
from waypoint._tools import ToolContext, tool
from waypoint.testing import reply, text, tool_use

MODEL = "claude-sonnet-4-6"
COLD_SECONDS = 2.5
"""The first read's cold start: longer than the harness's 2 s tool timeout."""


class Question(BaseModel):
    """Ask the requester a question."""

    question: str


class Choice(BaseModel):
    """The requester's answer."""

    choice: Literal["red", "blue"]


class NoteArgs(BaseModel):
    """Something to note down."""

    text: str


class ReadArgs(BaseModel):
    """A city to read about."""

    city: str


def folder() -> Path:
    """Where this app keeps its state: `$HARNESS_DIR`."""
    return Path(os.environ["HARNESS_DIR"])


def _db() -> sqlite3.Connection:
    db = sqlite3.connect(folder() / "notes.db", timeout=30)
    db.execute("CREATE TABLE IF NOT EXISTS notes (effect_key TEXT, text TEXT)")
    return db


def count_effects(key: str) -> int:
    """How many notes the downstream holds under exactly this key."""
    with _db() as db:
        return db.execute("SELECT COUNT(*) FROM notes WHERE effect_key = ?", (key,)).fetchone()[0]


def agents() -> list[Agent]:
    """The asker, the delegator with its helper, and the cold reader."""

    async def find(args: NoteArgs, ctx: ToolContext) -> dict | None:
        with _db() as db:
            row = db.execute("SELECT text FROM notes WHERE effect_key = ?", (ctx.effect_key,))
            found = row.fetchone()
        return None if found is None else {"noted": found[0]}

    @tool("effect", reconcile=find)
    async def note(args: NoteArgs, ctx: ToolContext) -> dict:
        """Note something down (the downstream does not deduplicate)."""
        hold = folder() / "hold"
        if hold.exists():
            (folder() / "holding").touch()
            while hold.exists():
                await asyncio.sleep(0.05)
        with _db() as db:
            db.execute("INSERT INTO notes VALUES (?, ?)", (ctx.effect_key, args.text))
        return {"noted": args.text}

    @tool("read")
    async def cold_read(args: ReadArgs) -> str:
        """Read about a city; the first read of a fresh folder is slow."""
        warm = folder() / "warm"
        if not warm.exists():
            await asyncio.sleep(COLD_SECONDS)
            warm.touch()
        return f"fine in {args.city}"

    ask_user = client_tool("ask_user", Question, Choice, description="Ask the requester.")
    helper = Agent(
        name="helper",
        model=MODEL,
        system="You note things down for another agent.",
        tools=[note],
        script=[reply(tool_use("note", text="from the helper")), reply(text("Noted."))],
    )
    errand = helper.as_tool(
        name="errand", description="Have the helper note it.", input_type=NoteArgs
    )
    return [
        Agent(
            name="asker",
            model=MODEL,
            system="Ask, then note the answer.",
            tools=[ask_user, note],
            script=[
                reply(tool_use("ask_user", question="Which colour?")),
                reply(tool_use("note", text="the colour")),
                reply(text("Noted the colour.")),
            ],
        ),
        Agent(
            name="delegator",
            model=MODEL,
            system="Delegate the note.",
            tools=[errand],
            script=[reply(tool_use("errand", text="please note")), reply(text("Delegated."))],
        ),
        helper,
        Agent(
            name="cold_reader",
            model=MODEL,
            system="Read, then answer.",
            tools=[cold_read],
            script=[reply(tool_use("cold_read", city="Lisbon")), reply(text("Read."))],
        ),
    ]
