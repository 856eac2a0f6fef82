"""A real MCP server for tests: payments in SQLite, over stdio or streamable HTTP.

`python -m tests.mcp_server stdio DB` or `python -m tests.mcp_server http DB PORT`.

- `fee` (pure), `balance` (read);
- `pay`: deduplicates on its `key` argument (an idempotent effect);
- `transfer`: does NOT deduplicate; `find_transfer` looks one up by its `reference`;
- `wire`: neither (only approval can make it acceptable).

Crash-test hook: with `$MCP_TEST_BARRIERS` set, `pay` honours the barriers
`before_commit.pay` / `after_commit.pay` (see `waypoint/demo/barriers.py`).
With the file `$MCP_TEST_SCHEMA_FLAG` present at start-up, `pay` also takes a `currency`:
a deploy of the server that changed a tool's schema.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import sys
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from waypoint.demo.barriers import Barriers


class Ledger:
    """Payments and transfers, counted by key: what must happen once."""

    def __init__(self, path: Path) -> None:
        self.path = path
        with self._db() as db:
            db.execute(
                "CREATE TABLE IF NOT EXISTS payments (key TEXT PRIMARY KEY, payee TEXT, "
                "amount INTEGER)"
            )
            db.execute(
                "CREATE TABLE IF NOT EXISTS transfers (reference TEXT, payee TEXT, amount INTEGER)"
            )

    def _db(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path, timeout=10)

    def count(self, key: str | None = None) -> int:
        """Payments plus transfers with that key (all of them without one)."""
        with self._db() as db:
            if key is None:
                a = db.execute("SELECT COUNT(*) FROM payments").fetchone()[0]
                b = db.execute("SELECT COUNT(*) FROM transfers").fetchone()[0]
            else:
                a = db.execute("SELECT COUNT(*) FROM payments WHERE key = ?", (key,)).fetchone()[0]
                b = db.execute(
                    "SELECT COUNT(*) FROM transfers WHERE reference = ?", (key,)
                ).fetchone()[0]
        return a + b


def build(db: Path) -> MCPServer:
    ledger = Ledger(db)
    barriers = Barriers(Path(p) if (p := os.environ.get("MCP_TEST_BARRIERS")) else None)
    changed = (flag := os.environ.get("MCP_TEST_SCHEMA_FLAG")) and Path(flag).exists()
    server = MCPServer("payments")

    @server.tool()
    def fee(amount: int) -> int:
        """The fee for a payment of that amount."""
        return max(1, amount // 100)

    @server.tool()
    def balance(payee: str) -> dict:
        """How much a payee has been paid so far."""
        with ledger._db() as conn:
            total = conn.execute(
                "SELECT COALESCE(SUM(amount), 0) FROM payments WHERE payee = ?", (payee,)
            ).fetchone()[0]
        return {"payee": payee, "paid": total}

    async def _pay(payee: str, amount: int, key: str) -> dict:
        if amount <= 0:
            raise ToolError(f"amount must be positive, got {amount}")
        await asyncio.to_thread(barriers.check, "before_commit", "pay")
        with ledger._db() as conn:
            conn.execute("INSERT OR IGNORE INTO payments VALUES (?, ?, ?)", (key, payee, amount))
        await asyncio.to_thread(barriers.check, "after_commit", "pay")
        return {"key": key, "payee": payee, "amount": amount}

    if changed:

        @server.tool()
        async def pay(payee: str, amount: int, key: str, currency: str = "EUR") -> dict:
            """Pay someone, in a currency; a repeated key pays once."""
            return await _pay(payee, amount, key)

    else:

        @server.tool()
        async def pay(payee: str, amount: int, key: str) -> dict:
            """Pay someone; a repeated key pays once."""
            return await _pay(payee, amount, key)

    @server.tool()
    def transfer(payee: str, amount: int, reference: str) -> dict:
        """Transfer money (no deduplication: every call moves money)."""
        with ledger._db() as conn:
            conn.execute("INSERT INTO transfers VALUES (?, ?, ?)", (reference, payee, amount))
        return {"reference": reference, "payee": payee, "amount": amount}

    @server.tool()
    def find_transfer(payee: str, amount: int, reference: str) -> dict | None:
        """The transfer with that reference, or null."""
        with ledger._db() as conn:
            row = conn.execute(
                "SELECT reference, payee, amount FROM transfers WHERE reference = ?",
                (reference,),
            ).fetchone()
        return None if row is None else {"reference": row[0], "payee": row[1], "amount": row[2]}

    @server.tool()
    def wire(payee: str, amount: int) -> str:
        """Wire money abroad (no key, no lookup)."""
        with ledger._db() as conn:
            conn.execute("INSERT INTO transfers VALUES (?, ?, ?)", ("wire", payee, amount))
        return f"wired {amount} to {payee}"

    @server.tool()
    def complain(text: str) -> str:
        """Write `text` to stderr, as a server logging a failure with its arguments does."""
        print(text, file=sys.stderr, flush=True)
        return "complained"

    @server.tool()
    def crash() -> str:
        """Exit the server process mid-call, as a crashed MCP server does."""
        os._exit(3)

    return server


if __name__ == "__main__":
    transport, db = sys.argv[1], Path(sys.argv[2])
    app = build(db)
    if transport == "stdio":
        app.run("stdio")
    else:
        app.run("streamable-http", host="127.0.0.1", port=int(sys.argv[3]))
