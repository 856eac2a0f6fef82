"""Agents for the recovery benchmark and the fleet drill, with a real SQLite downstream.

`app` is what their worker subprocesses load (`WAYPOINT_APP=bench.fleet_agents:app`):
- `napper` calls one tool that sleeps 2 s, then answers: the step a killed worker leaves in flight.
- `invoicer` looks an invoice up, charges it (an effect with a reconcile lookup) and sends a
  receipt (an idempotent effect in a plain `def`, run in a thread). Both effects land in the
  SQLite file named by `WAYPOINT_DRILL_DB`, which counts rows per key and every execution.
"""

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

DB_ENV = "WAYPOINT_DRILL_DB"
NAP_LOG_ENV = "WAYPOINT_NAP_LOG"
NAP_SECONDS = 2.0
INVOICE_OUTPUT = "Charged INV-7 and sent the receipt."


class Downstream:
    """Charges unique on the effect key, receipts deduplicated on it, and a log of every try."""

    def __init__(self, path: Path) -> None:
        self.path = path
        with self._db() as db:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute(
                "CREATE TABLE IF NOT EXISTS charges (effect_key TEXT PRIMARY KEY, "
                "workflow_id TEXT, amount INTEGER)"
            )
            db.execute(
                "CREATE TABLE IF NOT EXISTS receipts (effect_key TEXT PRIMARY KEY, "
                "workflow_id TEXT)"
            )
            db.execute(
                "CREATE TABLE IF NOT EXISTS executions (effect_key TEXT, tool TEXT, pid INTEGER)"
            )
            db.execute("CREATE TABLE IF NOT EXISTS conflicts (effect_key TEXT)")

    def _db(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path, timeout=60)

    def executed(self, key: str, tool_name: str) -> None:
        """Log that a tool body ran for this key (before it touches anything)."""
        with self._db() as db:
            db.execute("INSERT INTO executions VALUES (?, ?, ?)", (key, tool_name, os.getpid()))

    def charge(self, key: str, workflow_id: str, amount: int) -> dict:
        """Insert the charge; a second insert for one key is a would-be double charge, logged."""
        try:
            with self._db() as db:
                db.execute("INSERT INTO charges VALUES (?, ?, ?)", (key, workflow_id, amount))
        except sqlite3.IntegrityError:
            with self._db() as db:
                db.execute("INSERT INTO conflicts VALUES (?)", (key,))
            raise
        return {"charge": key, "amount": amount}

    def find_charge(self, key: str) -> dict | None:
        """The charge made under this key, if any."""
        with self._db() as db:
            row = db.execute("SELECT amount FROM charges WHERE effect_key = ?", (key,)).fetchone()
        return None if row is None else {"charge": key, "amount": row[0]}

    def receipt(self, key: str, workflow_id: str) -> str:
        """Send the receipt once per key (the downstream deduplicates)."""
        with self._db() as db:
            db.execute("INSERT OR IGNORE INTO receipts VALUES (?, ?)", (key, workflow_id))
        return f"receipt {key}"

    def rows(self, table: str, workflow_id: str | None = None) -> int:
        """Rows of `charges` or `receipts` (of one run, or all)."""
        assert table in ("charges", "receipts")
        with self._db() as db:
            if workflow_id is None:
                return db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
            query = f"SELECT COUNT(*) FROM {table} WHERE workflow_id = ?"
            return db.execute(query, (workflow_id,)).fetchone()[0]

    def count(self, key: str) -> int:
        """Rows under one effect key, charges and receipts together."""
        with self._db() as db:
            return sum(
                db.execute(f"SELECT COUNT(*) FROM {t} WHERE effect_key = ?", (key,)).fetchone()[0]
                for t in ("charges", "receipts")
            )

    def executions(self) -> int:
        """How many times an effect tool body ran, all keys together."""
        with self._db() as db:
            return db.execute("SELECT COUNT(*) FROM executions").fetchone()[0]

    def conflicts(self) -> int:
        """Inserts refused because the key was already charged: attempted double charges."""
        with self._db() as db:
            return db.execute("SELECT COUNT(*) FROM conflicts").fetchone()[0]


class NapArgs(BaseModel):
    seconds: float


class InvoiceArgs(BaseModel):
    invoice: str


class ChargeArgs(BaseModel):
    invoice: str
    amount: int


def napper() -> Agent:
    """One 2 s tool step between two model steps; each start is logged to `$WAYPOINT_NAP_LOG`."""
    log = os.environ.get(NAP_LOG_ENV)

    @tool("read")
    async def nap(args: NapArgs, ctx: ToolContext) -> str:
        """Sleep, as a slow API call would."""
        if log:
            with open(log, "a") as f:
                f.write(f"{ctx.workflow_id} {ctx.attempt} {time.time():.3f} {os.getpid()}\n")
        await asyncio.sleep(args.seconds)
        return "rested"

    return Agent(
        name="napper",
        model="bench",
        system="benchmark",
        tools=[nap],
        script=[reply(tool_use("nap", seconds=NAP_SECONDS)), reply(text("awake"))],
    )


def invoicer(downstream: Downstream) -> Agent:
    """Look up, charge (reconciled) and send a receipt (idempotent): two effects per run."""

    @tool("read")
    async def lookup(args: InvoiceArgs) -> dict:
        """Look an invoice up."""
        await asyncio.sleep(0.2)
        return {"invoice": args.invoice, "amount": 100}

    @tool("effect")
    async def charge(args: ChargeArgs, ctx: ToolContext) -> dict:
        """Charge the invoice; slow on both sides of the commit, so kills land in it."""
        assert ctx.effect_key
        downstream.executed(ctx.effect_key, "charge")
        await asyncio.sleep(0.3)
        row = downstream.charge(ctx.effect_key, ctx.workflow_id, args.amount)
        await asyncio.sleep(0.3)
        return row

    @charge.reconcile
    async def _find(args: ChargeArgs, ctx: ToolContext) -> dict | None:
        assert ctx.effect_key
        return downstream.find_charge(ctx.effect_key)

    @tool("effect", idempotent=True)
    def receipt(args: InvoiceArgs, ctx: ToolContext) -> str:
        """Send the receipt (blocking I/O in a plain `def`: Waypoint runs it in a thread)."""
        assert ctx.effect_key
        downstream.executed(ctx.effect_key, "receipt")
        time.sleep(0.2)
        return downstream.receipt(ctx.effect_key, ctx.workflow_id)

    return Agent(
        name="invoicer",
        model="bench",
        system="benchmark",
        tools=[lookup, charge, receipt],
        script=[
            reply(tool_use("lookup", invoice="INV-7")),
            reply(tool_use("charge", invoice="INV-7", amount=100)),
            reply(tool_use("receipt", invoice="INV-7")),
            reply(text(INVOICE_OUTPUT)),
        ],
    )


def app() -> list[Agent]:
    """The agents a worker subprocess serves; the invoicer only when a downstream is named."""
    agents = [napper()]
    if db := os.environ.get(DB_ENV):
        agents.append(invoicer(Downstream(Path(db))))
    return agents
