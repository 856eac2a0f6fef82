"""`MCPToolset`: an agent's MCP servers, their classified tools, discovered on the worker.

Discovery runs inside the `load_spec` activity, so the tool list a run uses is recorded in its
spec snapshot (and its schema hashes with it). A tool step whose snapshot no longer matches
this worker's copy re-lists that server once: a server that really changed then fails the
step with `ToolChanged`, and the agent's `on_change` policy applies.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from waypoint.errors import ToolDefinitionError
from waypoint.mcp.config import MCPServer
from waypoint.mcp.connection import Connection
from waypoint.mcp.tools import MCPTool
from waypoint.protocol import ToolSpec

logger = logging.getLogger(__name__)


class MCPToolset:
    """The MCP tools of one agent, as `Tool`s in the order its configuration names them."""

    def __init__(self, servers: Sequence[MCPServer], taken: set[str]) -> None:
        self.servers = list(servers)
        self.connections = {s.name: Connection(s) for s in self.servers}
        if len(self.connections) != len(self.servers):
            raise ToolDefinitionError("two MCP servers of one agent share a name")
        self._owner: dict[str, MCPServer] = {}
        for server in self.servers:
            for remote in server.tools:
                name = server.prefix + remote
                if name in taken or name in self._owner:
                    raise ToolDefinitionError(
                        f"MCP tool {name!r} of server {server.name!r} clashes with another tool "
                        "of the agent; give the server a prefix"
                    )
                self._owner[name] = server
        self._tools: dict[str, MCPTool] = {}

    def names(self) -> list[str]:
        """The names the model may know these tools by (prefixed), discovered or not yet."""
        return list(self._owner)

    def get(self, name: str) -> MCPTool | None:
        """The discovered tool of that name, if this worker has it."""
        return self._tools.get(name)

    def specs(self) -> list[ToolSpec]:
        """The discovered tools' specs, for the run's snapshot."""
        return [self._tools[n].spec() for n in self._owner if n in self._tools]

    async def discover(self) -> None:
        """List every server's tools and keep the classified ones."""
        for server in self.servers:
            await self._discover(server)

    async def refresh(self, name: str, schema_hash: str) -> None:
        """Re-list the tool's server if this worker's copy differs from the run's snapshot."""
        server = self._owner.get(name)
        known = self._tools.get(name)
        if server is not None and (known is None or known.spec().schema_hash != schema_hash):
            await self._discover(server)

    async def aclose(self) -> None:
        """Close every open session (stdio servers exit)."""
        for connection in self.connections.values():
            await connection.close()

    async def _discover(self, server: MCPServer) -> None:
        connection = self.connections[server.name]
        found = {t.name: t for t in await connection.list_tools()}
        for remote, tool_class in server.tools.items():
            name = server.prefix + remote
            tool = found.get(remote)
            lookup = found.get(tool_class.reconcile_tool) if tool_class.reconcile_tool else None
            if tool is None or (tool_class.reconcile_tool and lookup is None):
                missing = remote if tool is None else tool_class.reconcile_tool
                logger.warning("MCP server %r lacks %r: %r not offered", server.name, missing, name)
                self._tools.pop(name, None)
                continue
            self._tools[name] = MCPTool(server, connection, tool_class, tool, lookup)
