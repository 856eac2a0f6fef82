"""Small agents for tests, with a real SQLite downstream that counts effects by key."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, Field

from waypoint._agent import Agent
from waypoint._tools import Tool, ToolContext, tool
from waypoint.protocol import Limits
from waypoint.testing import Script, reply, text, tool_use


@dataclass
class Faults:
    """Injected failures: each counter is how many more times that fault fires."""

    lose_response: int = 0
    """Commit the payment, then raise as if the reply was lost."""
    fail_before_commit: int = 0
    """Raise before anything is written."""
    reconcile_unreachable: int = 0
    """The downstream lookup raises: nobody can tell whether the payment happened."""
    executions: int = 0
    """How many times the pay tool body ran."""


class Payments:
    """A payments table unique on the effect key: the thing that must happen once."""

    def __init__(self, path: Path, faults: Faults | None = None) -> None:
        self.path = path
        self.faults = faults or Faults()
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
        faults = payments.faults
        faults.executions += 1
        if faults.fail_before_commit:
            faults.fail_before_commit -= 1
            raise ConnectionError("bank unreachable before the payment was sent")
        row = payments.pay(ctx.effect_key, args.payee, args.amount)
        if faults.lose_response:
            faults.lose_response -= 1
            raise TimeoutError("bank accepted the payment but the reply was lost")
        return row

    @pay.reconcile
    async def _find(args: PayArgs, ctx: ToolContext) -> dict | None:
        assert ctx.effect_key
        if payments.faults.reconcile_unreachable:
            payments.faults.reconcile_unreachable -= 1
            raise ConnectionError("bank lookup unreachable")
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


def long_script(turns: int, pay_every: int = 3) -> Script:
    """`turns` model turns: each looks up the weather, every `pay_every`th also pays."""
    entries: list = []
    for turn in range(1, turns):
        calls = [tool_use("weather", city=f"city{turn}")]
        if turn % pay_every == 0:
            calls.append(tool_use("pay", payee=f"p{turn}", amount=turn))
        entries.append(reply(text(f"turn {turn}"), *calls))
    entries.append(reply(text(f"done after {turns} turns")))
    return entries


class NewPayArgs(BaseModel):
    payee: str
    amount: int
    currency: str = "EUR"


def with_tools(agent: Agent, *tools: Tool) -> Agent:
    """The agent with `tools` added (one of the same name replaced), its spec checked again."""
    names = {t.name for t in tools}
    agent.tools = [t for t in agent.tools if t.name not in names] + list(tools)
    agent.__post_init__()
    return agent


def with_changed_pay(agent, payments: Payments, on_change: str):  # type: ignore[no-untyped-def]
    """The same agent after a deploy that changed the pay tool's schema."""

    @tool("effect", idempotent=True)
    async def pay(args: NewPayArgs, ctx: ToolContext) -> dict:
        """Pay someone, in a currency."""
        assert ctx.effect_key
        return payments.pay(ctx.effect_key, args.payee, args.amount)

    agent.on_change = on_change
    return with_tools(agent, pay)
