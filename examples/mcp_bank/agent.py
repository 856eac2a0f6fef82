"""An agent whose tools come from the bank's MCP server (`--app examples.mcp_bank.agent:agents`).

`WAYPOINT_BANK` names the bank's SQLite file (default `.waypoint/mcp-bank.sqlite3`).
"""

from __future__ import annotations

import os
import sys
from datetime import timedelta

from waypoint import Agent
from waypoint.mcp import MCPServer, MCPToolClass, effect
from waypoint.testing import reply, text, tool_use


def bank(db: str) -> MCPServer:
    """The bank's server, started by the worker as a subprocess over stdio."""
    return MCPServer.stdio(
        "bank",
        sys.executable,
        args=["-m", "examples.mcp_bank.server", db],
        tools={
            # A read with its own timeout: a cold server start counts against it.
            "balance": MCPToolClass("read", timeout=timedelta(seconds=20)),
            "pay": effect(idempotency_argument="key", timeout=timedelta(seconds=30)),
        },
        read_timeout=15.0,  # one MCP request; a longer one fails the try, which is retried
    )


SCRIPT = [
    reply(text("Checking the balance."), tool_use("balance", account="operating")),
    reply(tool_use("pay", payee="ACME", amount_cents=120_00)),
    reply(text("Paid ACME 120.00.")),
]


def agents() -> list[Agent]:
    """The treasurer, paying through the bank's MCP server."""
    return [
        Agent(
            name="treasurer",
            model="claude-sonnet-4-6",
            system="You pay invoices. Check the balance first.",
            mcp=[bank(os.environ.get("WAYPOINT_BANK", ".waypoint/mcp-bank.sqlite3"))],
            script=SCRIPT,
        )
    ]
