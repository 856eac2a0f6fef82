"""MCP servers as tool sources: their classified tools run through the same funnel as any tool.

```python
from waypoint.mcp import MCPServer, effect

payments = MCPServer.http(
    "payments",
    "http://127.0.0.1:8000/mcp",
    tools={"balance": "read", "pay": effect(idempotency_argument="key")},
)
agent = Agent(name="payer", model="claude-sonnet-4-6", system="...", mcp=[payments])
```
"""

from waypoint.mcp.config import MCPServer, MCPToolClass, effect
from waypoint.mcp.tools import MCPTool
from waypoint.mcp.toolset import MCPToolset

__all__ = ["MCPServer", "MCPTool", "MCPToolClass", "MCPToolset", "effect"]
