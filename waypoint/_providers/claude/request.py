"""The Messages API parameters of one model step, from the request and the agent's settings.

Prompt caching is on by default: breakpoints on the last tool, on the system prompt, on the
newest message and on the message that was newest one call earlier. The last one reads back
exactly what the previous call wrote, even when a reply with many tool calls pushes the new
breakpoint past the API's 20-block lookback.
"""

from __future__ import annotations

from typing import Any

from anthropic.types import CacheControlEphemeralParam

from waypoint._providers.claude.convert import message_param, tool_param
from waypoint.protocol import ModelRequest, ModelSettings

MIN_THINKING_BUDGET = 1024
"""The API's smallest `budget_tokens`."""

_UNCACHEABLE = frozenset({"thinking", "redacted_thinking"})


def stream_params(request: ModelRequest) -> dict[str, Any]:
    """Keyword arguments for `client.messages.stream(...)`."""
    settings = request.settings
    cache = _cache_control(settings)
    params: dict[str, Any] = {
        "model": request.model,
        "max_tokens": request.max_tokens,
        "messages": _messages(request, cache),
    }
    if request.system:
        system: dict[str, Any] = {"type": "text", "text": request.system}
        if cache:
            system["cache_control"] = cache
        params["system"] = [system] if cache else request.system
    if request.tools or request.server_tools:
        tools: list[dict[str, Any]] = [dict(tool_param(t)) for t in request.tools]
        tools += [t.param() for t in request.server_tools]
        if cache:
            tools[-1]["cache_control"] = cache
        params["tools"] = tools
        if choice := _tool_choice(settings):
            params["tool_choice"] = choice
    if request.container:
        params["container"] = request.container
    if thinking := _thinking(settings, request.max_tokens):
        params["thinking"] = thinking
    if settings.effort is not None:
        params["output_config"] = {"effort": settings.effort}
    return params


def _cache_control(settings: ModelSettings) -> CacheControlEphemeralParam | None:
    if settings.cache == "off":
        return None
    if settings.cache == "1h":
        return {"type": "ephemeral", "ttl": "1h"}
    return {"type": "ephemeral"}


def _messages(
    request: ModelRequest, cache: CacheControlEphemeralParam | None
) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [dict(message_param(m)) for m in request.messages]
    if cache is None or not messages:
        return messages
    newest = len(messages) - 1
    marked = [newest]
    previous = next((i for i in range(newest - 1, -1, -1) if messages[i]["role"] == "user"), None)
    if previous is not None:
        marked.append(previous)
    for index in marked:
        messages[index] = _with_breakpoint(messages[index], cache)
    return messages


def _with_breakpoint(message: dict[str, Any], cache: CacheControlEphemeralParam) -> dict[str, Any]:
    """The message with `cache_control` on its last block that may carry one."""
    content: list[dict[str, Any]] = [dict(block) for block in message["content"]]
    for block in reversed(content):
        if block["type"] in _UNCACHEABLE or (block["type"] == "text" and not block["text"]):
            continue  # thinking cannot carry a breakpoint, nor can empty text
        block["cache_control"] = cache
        return {**message, "content": content}
    return message


def _tool_choice(settings: ModelSettings) -> dict[str, Any] | None:
    """None leaves the API's default (`auto`, parallel calls allowed)."""
    name = settings.tool_choice
    if name == "none":
        return {"type": "none"}  # cannot carry `disable_parallel_tool_use`
    if name == "auto" and settings.parallel_tool_calls:
        return None
    choice: dict[str, Any] = (
        {"type": name} if name in ("auto", "any") else {"type": "tool", "name": name}
    )
    if not settings.parallel_tool_calls:
        choice["disable_parallel_tool_use"] = True
    return choice


def _thinking(settings: ModelSettings, max_tokens: int) -> dict[str, Any] | None:
    if settings.thinking == "adaptive":
        return {"type": "adaptive"}
    if settings.thinking == "enabled":
        # The API wants the budget below max_tokens; shrink it rather than fail the step.
        budget = settings.thinking_budget
        if budget >= max_tokens and max_tokens - 1 >= MIN_THINKING_BUDGET:
            budget = max_tokens - 1
        return {"type": "enabled", "budget_tokens": budget}
    return None
