"""Agents that use the test MCP server (`tests/mcp_server.py`), in-process or in a worker process.

`--app tests.mcp_app:agents` reaches the server over streamable HTTP at `$MCP_TEST_URL`.
"""

from __future__ import annotations

import os
import sys
from datetime import timedelta
from pathlib import Path
from typing import Literal

from waypoint._agent import Agent
from waypoint.mcp import MCPServer, MCPToolClass, effect
from waypoint.protocol import ToolKind
from waypoint.protocol.policy import ApprovalPolicy
from waypoint.testing import Script, reply, text, tool_use

ROOT = Path(__file__).parent.parent


def classes(approval: bool = False) -> dict[str, MCPToolClass | ToolKind]:
    return {
        "fee": "pure",
        "balance": "read",
        # A fresh worker's first call also opens the session: more than a kill test's 2 s.
        "pay": effect(
            idempotency_argument="key", requires_approval=approval, timeout=timedelta(seconds=30)
        ),
        "transfer": effect(idempotency_argument="reference", reconcile_tool="find_transfer"),
    }


def stdio_server(db: Path, flag: Path | None = None, approval: bool = False) -> MCPServer:
    env = {"PYTHONPATH": str(ROOT)}
    if flag is not None:
        env["MCP_TEST_SCHEMA_FLAG"] = str(flag)
    return MCPServer.stdio(
        "payments",
        sys.executable,
        ["-m", "tests.mcp_server", "stdio", str(db)],
        env=env,
        cwd=str(ROOT),
        tools=classes(approval),
    )


def http_server(url: str, approval: bool = False) -> MCPServer:
    return MCPServer.http("payments", url, tools=classes(approval))


SCRIPT: Script = [
    reply(text("Checking."), tool_use("fee", amount=500), tool_use("balance", payee="ada")),
    reply(tool_use("pay", payee="ada", amount=5)),
    reply(tool_use("pay", payee="ada", amount=0)),
    reply(text("Paid ada 5.")),
]


def mcp_agent(
    server: MCPServer,
    script: Script = SCRIPT,
    on_change: Literal["refuse", "replan"] = "refuse",
    policy: ApprovalPolicy | None = None,
) -> Agent:
    return Agent(
        name="mcp_payer",
        model="claude-sonnet-4-6",
        system="You pay people through the payments server.",
        mcp=[server],
        script=script,
        on_change=on_change,
        policy=policy,
    )


def agents() -> list[Agent]:
    """The MCP payer, over HTTP at `$MCP_TEST_URL`."""
    return [mcp_agent(http_server(os.environ["MCP_TEST_URL"]))]
