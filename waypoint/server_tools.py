"""Claude's server tools: the Messages API runs them inside a call, no worker involved.

`Agent(server_tools=[web_search(max_uses=3)])` sends each definition with every model call.
Their calls and results come back as blocks of the reply, recorded as the API sent them and
sent back unchanged (`waypoint.protocol.ServerBlock`). They cannot be gated by an approval or a
policy (they have run when the reply arrives), so give an agent only those it may use freely.
The versions are the Messages API's; pass `version=` for a newer one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from waypoint.errors import ToolDefinitionError
from waypoint.protocol import ServerToolSpec


def _options(**given: Any) -> dict[str, Any]:
    """The settings that were given, as the API takes them."""
    return {k: list(v) if isinstance(v, tuple) else v for k, v in given.items() if v is not None}


def _domains(tool: str, allowed: Sequence[str] | None, blocked: Sequence[str] | None) -> None:
    if allowed is not None and blocked is not None:
        raise ToolDefinitionError(f"{tool}: give allowed_domains or blocked_domains, not both")


def web_search(
    *,
    max_uses: int | None = None,
    allowed_domains: Sequence[str] | None = None,
    blocked_domains: Sequence[str] | None = None,
    user_location: dict[str, str] | None = None,
    version: str = "web_search_20250305",
) -> ServerToolSpec:
    """Search the web; results come back with citations. Billed per search, `max_uses` caps it.

    `user_location`: `{"type": "approximate", "city": ..., "region": ..., "country": ...,
    "timezone": ...}`.
    """
    _domains("web_search", allowed_domains, blocked_domains)
    options = _options(
        max_uses=max_uses,
        allowed_domains=allowed_domains and list(allowed_domains),
        blocked_domains=blocked_domains and list(blocked_domains),
        user_location=user_location,
    )
    return ServerToolSpec(type=version, name="web_search", options=options)


def web_fetch(
    *,
    max_uses: int | None = None,
    allowed_domains: Sequence[str] | None = None,
    blocked_domains: Sequence[str] | None = None,
    citations: bool = False,
    max_content_tokens: int | None = None,
    version: str = "web_fetch_20250910",
) -> ServerToolSpec:
    """Fetch a page or PDF by URL (one the conversation already holds)."""
    _domains("web_fetch", allowed_domains, blocked_domains)
    options = _options(
        max_uses=max_uses,
        allowed_domains=allowed_domains and list(allowed_domains),
        blocked_domains=blocked_domains and list(blocked_domains),
        citations={"enabled": True} if citations else None,
        max_content_tokens=max_content_tokens,
    )
    return ServerToolSpec(type=version, name="web_fetch", options=options)


def code_execution(*, version: str = "code_execution_20250825") -> ServerToolSpec:
    """Run code in Anthropic's sandbox (bash and file editing in a container)."""
    return ServerToolSpec(type=version, name="code_execution")


def tool_search(
    kind: Literal["regex", "bm25"] = "regex", *, version: str = "20251119"
) -> ServerToolSpec:
    """Let Claude search the agent's tools, for agents with many of them."""
    name = f"tool_search_tool_{kind}"
    return ServerToolSpec(type=f"{name}_{version}", name=name)
