"""One open MCP session per server per worker process, and MCP results as the model reads them.

Starting a stdio server or opening an HTTP session costs far more than a call, so a worker
opens each server's session on first use and keeps it. The session lives in a task of its own
(the SDK's context managers must be entered and left in one task); activities send requests
through it. A failed request drops the session, so the next attempt opens a fresh one.
The `mcp` package is imported here only: the workflow sandbox never loads it.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Any, TextIO

from waypoint._operations.child_output import child_stderr
from waypoint.mcp.config import MCPServer
from waypoint.protocol import ImageBlock, RichBlock, TextBlock

if TYPE_CHECKING:
    from mcp import Client
    from mcp.types import CallToolResult, Tool


class Connection:
    """A lazily opened, shared session to one MCP server."""

    def __init__(self, server: MCPServer) -> None:
        self.server = server
        self._client: Client | None = None
        self._holder: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self._lock: asyncio.Lock | None = None

    async def list_tools(self) -> list[Tool]:
        """Every tool the server offers now, all pages."""
        tools: list[Tool] = []
        cursor: str | None = None
        async with self._request() as client:
            while True:
                page = await client.list_tools(cursor=cursor, cache_mode="refresh")
                tools += page.tools
                cursor = page.next_cursor
                if cursor is None:
                    return tools

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> CallToolResult:
        """Call a tool; a transport failure raises (and the next call reconnects)."""
        async with self._request() as client:
            return await client.call_tool(name, arguments)

    async def close(self) -> None:
        """End the session (a stdio server process exits with it)."""
        holder, self._holder, self._client = self._holder, None, None
        if holder is not None:
            self._stop.set()
            with contextlib.suppress(Exception):
                await holder

    @contextlib.asynccontextmanager
    async def _request(self):  # noqa: ANN202
        from mcp import MCPError
        from mcp.types import CONNECTION_CLOSED, REQUEST_TIMEOUT

        client = await self._open()
        try:
            yield client
        except MCPError as err:
            # The SDK reports a dead transport (a stdio server that exited, a dropped HTTP
            # stream) and a request that timed out as MCPErrors too; only other codes are the
            # server's own answer, after which the session is fine.
            if err.code in (CONNECTION_CLOSED, REQUEST_TIMEOUT):
                await self.close()
            raise
        except Exception:
            await self.close()
            raise

    async def _open(self) -> Client:
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._client is not None and self._holder is not None and not self._holder.done():
                return self._client
            await self.close()
            self._stop = asyncio.Event()
            ready: asyncio.Future[Client] = asyncio.get_running_loop().create_future()
            self._holder = asyncio.create_task(self._hold(ready, self._stop))
            self._client = await ready
            return self._client

    async def _hold(self, ready: asyncio.Future[Client], stop: asyncio.Event) -> None:
        """Keep the session open until `close`; report a failure to open to the waiter."""
        try:
            with child_stderr(f"MCP server {self.server.name!r}") as errlog:
                async with _client(self.server, errlog) as client:
                    ready.set_result(client)
                    await stop.wait()
        except BaseException as err:
            if not ready.done():
                ready.set_exception(err)
            elif not isinstance(err, Exception):
                raise
        finally:
            self._client = None


def _client(server: MCPServer, errlog: TextIO) -> Client:
    from mcp import Client, StdioServerParameters
    from mcp.client.stdio import stdio_client

    if server.transport == "stdio":
        params = StdioServerParameters(
            command=server.command,
            args=list(server.args),
            env=dict(server.env) if server.env else None,
            cwd=server.cwd,
        )
        transport = stdio_client(params, errlog=errlog)
        return Client(transport, read_timeout_seconds=server.read_timeout, cache=None)
    if server.headers:
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared._httpx_utils import create_mcp_http_client

        http = create_mcp_http_client(headers=dict(server.headers))
        transport = streamable_http_client(server.url, http_client=http)
        return Client(transport, read_timeout_seconds=server.read_timeout, cache=None)
    return Client(server.url, read_timeout_seconds=server.read_timeout, cache=None)


def value_of(result: CallToolResult) -> Any:
    """The result's data: structured content (unwrapped from `{"result": ...}`), else its text."""
    data = result.structured_content
    if data is not None:
        if isinstance(data, dict) and list(data) == ["result"]:
            return data["result"]
        return data
    texts = [getattr(c, "text", "") for c in result.content if c.type == "text"]
    return "\n".join(texts) if texts else None


def rendered(result: CallToolResult) -> str | list[RichBlock] | Any:
    """What the model reads: text and images as they came, else the structured data."""
    images = [c for c in result.content if c.type == "image"]
    if not images:
        value = value_of(result)
        return "" if value is None else value
    blocks: list[RichBlock] = []
    for c in result.content:
        if c.type == "text":
            blocks.append(TextBlock(text=getattr(c, "text", "")))
        elif c.type == "image":
            image = {"media_type": getattr(c, "mime_type", ""), "data": getattr(c, "data", "")}
            blocks.append(ImageBlock.model_validate(image))
    return blocks


def error_text(result: CallToolResult) -> str:
    """The message of an `isError` result."""
    text = "\n".join(getattr(c, "text", "") for c in result.content if c.type == "text")
    return text or "the MCP tool reported an error"
