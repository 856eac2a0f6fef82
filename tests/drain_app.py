"""Agents for the drain tests: one slow effect, async or plain `def`, into a ledger that
does not deduplicate, so a second run of the effect is a second transfer (`--app
tests.drain_app:agents`)."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import time
from pathlib import Path

from pydantic import BaseModel

from waypoint._agent import Agent
from waypoint._tools import ToolContext, tool
from waypoint.testing import reply, text, tool_use


class Transfers:
    """An append-only transfers table: safe only through `reconcile`, like most bank APIs."""

    def __init__(self, path: Path) -> None:
        self.path = path
        with sqlite3.connect(path) as db:
            db.execute("CREATE TABLE IF NOT EXISTS transfers (effect_key TEXT, payee TEXT)")

    def send(self, key: str, payee: str) -> dict:
        with sqlite3.connect(self.path) as db:
            db.execute("INSERT INTO transfers VALUES (?, ?)", (key, payee))
        return {"effect_key": key, "payee": payee}

    def find(self, key: str) -> dict | None:
        with sqlite3.connect(self.path) as db:
            row = db.execute(
                "SELECT effect_key, payee FROM transfers WHERE effect_key = ?", (key,)
            ).fetchone()
        return None if row is None else {"effect_key": row[0], "payee": row[1]}

    def count(self) -> int:
        with sqlite3.connect(self.path) as db:
            return db.execute("SELECT COUNT(*) FROM transfers").fetchone()[0]


class SendArgs(BaseModel):
    payee: str


def build(transfers: Transfers, started: Path, seconds: float) -> list[Agent]:
    """Three agents whose one step is a transfer taking `seconds`; `started` marks its start."""

    @tool("effect")
    async def send_async(args: SendArgs, ctx: ToolContext) -> dict:
        """Send money, slowly, awaiting the bank."""
        assert ctx.effect_key
        started.touch()
        await asyncio.sleep(seconds)
        return transfers.send(ctx.effect_key, args.payee)

    @tool("effect")
    def send_blocking(args: SendArgs, ctx: ToolContext) -> dict:
        """Send money, slowly, with a blocking client (runs in a thread)."""
        assert ctx.effect_key
        started.touch()
        time.sleep(seconds)
        return transfers.send(ctx.effect_key, args.payee)

    def slow_send(key: str, payee: str) -> dict:
        started.touch()
        time.sleep(seconds)
        return transfers.send(key, payee)

    @tool("effect")
    async def send_to_thread(args: SendArgs, ctx: ToolContext) -> dict:
        """Send money, slowly, with a blocking client awaited in a thread (the docs' way)."""
        assert ctx.effect_key
        return await asyncio.to_thread(slow_send, ctx.effect_key, args.payee)

    async def find(args: SendArgs, ctx: ToolContext) -> dict | None:
        assert ctx.effect_key
        return transfers.find(ctx.effect_key)

    send_async.reconcile(find)
    send_blocking.reconcile(find)
    send_to_thread.reconcile(find)
    return [
        Agent(
            name=name,
            model="claude-sonnet-4-6",
            system="You send money.",
            tools=[fn],
            script=[reply(tool_use(fn.name, payee="ada")), reply(text("Sent."))],
        )
        for name, fn in (
            ("async_sender", send_async),
            ("thread_sender", send_blocking),
            ("to_thread_sender", send_to_thread),
        )
    ]


def agents() -> list[Agent]:
    """The agents over `$DRAIN_TEST_TRANSFERS`, marking starts at `$DRAIN_TEST_STARTED`."""
    return build(
        Transfers(Path(os.environ["DRAIN_TEST_TRANSFERS"])),
        Path(os.environ["DRAIN_TEST_STARTED"]),
        float(os.environ["DRAIN_TEST_SECONDS"]),
    )
