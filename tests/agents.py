"""Small agents for tests, with a real SQLite downstream that counts effects by key."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from pydantic import BaseModel, Field

from waypoint.agent import Agent
from waypoint.models import Limits
from waypoint.scripted import Script, reply, text, tool_use
from waypoint.tools import ToolContext, tool


class Payments:
    """A payments table unique on the effect key: the thing that must happen once."""

    def __init__(self, path: Path) -> None:
        self.path = path
        with self._db() as db:
            db.execute(
                "CREATE TABLE IF NOT EXISTS payments (effect_key TEXT PRIMARY KEY, "
                "payee TEXT, amount INTEGER)"
            )

    def _db(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path)

    def pay(self, key: str, payee: str, amount: int) -> dict:
        with self._db() as db:
            db.execute("INSERT OR IGNORE INTO payments VALUES (?, ?, ?)", (key, payee, amount))
        found = self.find(key)
        assert found is not None
        return found

    def find(self, key: str) -> dict | None:
        with self._db() as db:
            row = db.execute(
                "SELECT effect_key, payee, amount FROM payments WHERE effect_key = ?", (key,)
            ).fetchone()
        return None if row is None else {"effect_key": row[0], "payee": row[1], "amount": row[2]}

    def count(self, key: str | None = None) -> int:
        with self._db() as db:
            if key is None:
                return db.execute("SELECT COUNT(*) FROM payments").fetchone()[0]
            return db.execute(
                "SELECT COUNT(*) FROM payments WHERE effect_key = ?", (key,)
            ).fetchone()[0]


class AddArgs(BaseModel):
    a: int
    b: int


class LookupArgs(BaseModel):
    city: str = Field(description="City name")


class PayArgs(BaseModel):
    payee: str
    amount: int = Field(gt=0)


def build_agent(
    payments: Payments,
    script: Script,
    *,
    name: str = "payer",
    approval: bool | object = False,
    limits: Limits | None = None,
) -> Agent:
    """An agent with a pure, a read and an effect tool."""

    @tool("pure")
    async def add(args: AddArgs) -> int:
        """Add two integers."""
        return args.a + args.b

    @tool("read")
    async def weather(args: LookupArgs) -> str:
        """Look up the weather."""
        if args.city == "Atlantis":
            raise ValueError("no such city")
        return f"sunny in {args.city}"

    @tool("effect", requires_approval=approval)  # type: ignore[arg-type]
    async def pay(args: PayArgs, ctx: ToolContext) -> dict:
        """Pay someone."""
        assert ctx.effect_key
        return payments.pay(ctx.effect_key, args.payee, args.amount)

    @pay.reconcile
    async def _find(args: PayArgs, ctx: ToolContext) -> dict | None:
        assert ctx.effect_key
        return payments.find(ctx.effect_key)

    return Agent(
        name=name,
        model="claude-sonnet-4-6",
        system="You pay people.",
        tools=[add, weather, pay],
        limits=limits or Limits(),
        script=script,
    )


PAY_SCRIPT: Script = [
    reply(text("Checking."), tool_use("weather", city="Oslo"), tool_use("add", a=2, b=3)),
    reply(tool_use("pay", payee="ada", amount=5)),
    reply(text("Paid ada 5.")),
]
