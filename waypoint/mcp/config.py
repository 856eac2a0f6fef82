"""How an agent reaches an MCP server, and the class it gives each of the server's tools.

Only classified tools are offered to the model. An effect must say how it is made safe: the
argument that carries Waypoint's effect key (the server deduplicates on it), a tool of the same
server that looks the effect up, or a person's approval. Otherwise it is refused here, when
the agent is defined, like an unsafe Python effect tool.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Literal

from waypoint.errors import ToolDefinitionError
from waypoint.protocol import ToolKind

ApprovalRule = bool | Callable[[dict[str, Any]], bool]
"""`True`, or a predicate over the call's arguments (a dict)."""


@dataclass(frozen=True)
class MCPToolClass:
    """The class of one MCP tool and, for an effect, how a retry is made safe.

    Args:
        kind: `pure`, `read` or `effect`.
        idempotency_argument: The tool's argument that receives `ctx.effect_key`; it is hidden
            from the model. The server must deduplicate on it.
        reconcile_tool: A tool of the same server called with the same arguments (and the key)
            after a crash: it returns the effect's result if it happened, `null` or nothing if
            not, and an error result if it cannot tell.
        requires_approval: A person approves each call; an approved call whose outcome is
            unclear after a crash is never retried blindly: it waits for an operator.
        approval_timeout: How long a person has to decide; None waits for ever.
        timeout: Start-to-close of one call; defaults to the run's `StepOptions.tool_timeout`.
        max_attempts: Tries before giving up; defaults to `StepOptions.tool_max_attempts`.
    """

    kind: ToolKind
    idempotency_argument: str | None = None
    reconcile_tool: str | None = None
    requires_approval: ApprovalRule = False
    approval_timeout: timedelta | None = None
    timeout: timedelta | None = None
    max_attempts: int | None = None

    def check(self, server: str, name: str) -> None:
        """Refuse an effect that cannot be made safe, and safety options on a non-effect."""
        if self.kind == "effect":
            if not (self.idempotency_argument or self.reconcile_tool or self.requires_approval):
                raise ToolDefinitionError(
                    f"MCP effect tool {name!r} of server {server!r} cannot be made safe: pass "
                    "effect(idempotency_argument=ARG) if the server deduplicates on an argument, "
                    "effect(reconcile_tool=TOOL) if another tool can look the effect up, or "
                    "effect(requires_approval=True)"
                )
        elif self.idempotency_argument or self.reconcile_tool:
            raise ToolDefinitionError(
                f"MCP tool {name!r} of server {server!r} is {self.kind!r}: only an effect takes "
                "idempotency_argument or reconcile_tool"
            )


def effect(
    *,
    idempotency_argument: str | None = None,
    reconcile_tool: str | None = None,
    requires_approval: ApprovalRule = False,
    approval_timeout: timedelta | None = None,
    timeout: timedelta | None = None,
    max_attempts: int | None = None,
) -> MCPToolClass:
    """Classify an MCP tool as an effect (see `MCPToolClass` for the arguments)."""
    return MCPToolClass("effect", **locals())  # its arguments, as given


@dataclass(frozen=True)
class MCPServer:
    """An MCP server an agent uses, and the class of each tool it may offer the model.

    Build one with `MCPServer.stdio(...)` or `MCPServer.http(...)`. Secrets belong in `env` or
    `headers`: they stay on the worker and never enter a payload.
    """

    name: str
    transport: Literal["stdio", "http"]
    tools: Mapping[str, MCPToolClass] = field(default_factory=dict)
    command: str = ""
    args: Sequence[str] = ()
    env: Mapping[str, str] | None = None
    cwd: str | None = None
    url: str = ""
    headers: Mapping[str, str] | None = None
    prefix: str = ""
    """Put before each tool's name as the model sees it, e.g. `payments_`."""
    read_timeout: float = 60.0
    """Seconds one MCP request may take before the call fails (and is retried)."""

    @classmethod
    def stdio(
        cls,
        name: str,
        command: str,
        args: Sequence[str] = (),
        *,
        tools: Mapping[str, MCPToolClass | ToolKind],
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        prefix: str = "",
        read_timeout: float = 60.0,
    ) -> MCPServer:
        """A server the worker starts as a subprocess and talks to over stdin/stdout."""
        return cls(
            name,
            "stdio",
            _classes(name, tools),
            command=command,
            args=tuple(args),
            env=env,
            cwd=cwd,
            prefix=prefix,
            read_timeout=read_timeout,
        )

    @classmethod
    def http(
        cls,
        name: str,
        url: str,
        *,
        tools: Mapping[str, MCPToolClass | ToolKind],
        headers: Mapping[str, str] | None = None,
        prefix: str = "",
        read_timeout: float = 60.0,
    ) -> MCPServer:
        """A server reached over streamable HTTP at `url` (e.g. `http://host:8000/mcp`)."""
        return cls(
            name,
            "http",
            _classes(name, tools),
            url=url,
            headers=headers,
            prefix=prefix,
            read_timeout=read_timeout,
        )


def _classes(server: str, tools: Mapping[str, MCPToolClass | ToolKind]) -> dict[str, MCPToolClass]:
    """Shorthands (`"read"`) expanded, and every class checked at definition time."""
    classes = {n: c if isinstance(c, MCPToolClass) else MCPToolClass(c) for n, c in tools.items()}
    for name, c in classes.items():
        c.check(server, name)
    return classes
