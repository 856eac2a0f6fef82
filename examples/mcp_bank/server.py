"""A bank as an MCP server for the pinned `mcp` (2.x: `mcp.server.mcpserver`, once FastMCP).

`python -m examples.mcp_bank.server DB` serves over stdio; `pay` deduplicates on its `key`,
the argument Waypoint fills with the step's effect key.
"""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path

from mcp.server.mcpserver import MCPServer


def build(db: Path) -> MCPServer:
    """The server over the SQLite file `db`."""
    with sqlite3.connect(db) as conn:
        conn.execute(
            "CREATE TABLE IF NOT EXISTS payments (key TEXT PRIMARY KEY, payee TEXT, cents INT)"
        )
    server = MCPServer("bank")

    @server.tool()
    def balance(account: str) -> dict:
        """An account's balance in cents."""
        return {"account": account, "balance_cents": 500_00}

    @server.tool()
    def pay(payee: str, amount_cents: int, key: str) -> dict:
        """Pay someone; a second call with the same key pays nothing more."""
        with sqlite3.connect(db) as conn:
            conn.execute(
                "INSERT OR IGNORE INTO payments VALUES (?, ?, ?)", (key, payee, amount_cents)
            )
            row = conn.execute("SELECT payee, cents FROM payments WHERE key = ?", (key,)).fetchone()
        return {"key": key, "payee": row[0], "amount_cents": row[1]}

    return server


if __name__ == "__main__":
    build(Path(sys.argv[1])).run("stdio")
