"""The MCP example of docs/composable-agents.md, verbatim (`tests/test_mcp.py` runs it)."""

from waypoint import Agent, ToolDefinitionError
from waypoint.mcp import MCPServer, effect

bank = MCPServer.http(
    "bank",
    "http://127.0.0.1:8000/mcp",
    tools={
        "balance": "read",
        "pay": effect(idempotency_argument="key"),
        "transfer": effect(idempotency_argument="reference", reconcile_tool="find_transfer"),
        "wire": effect(requires_approval=True),
    },
)
agent = Agent(name="treasurer", model="claude-sonnet-4-6", system="You pay.", mcp=[bank])
try:
    MCPServer.stdio("shell", "mcp-shell", tools={"run": "effect"})
except ToolDefinitionError as err:
    print(err)  # MCP effect tool 'run' of server 'shell' cannot be made safe: ...
