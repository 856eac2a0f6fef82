"""Waypoint: durable Claude agents on Temporal. A run resumes, never restarts.

Exports load lazily: Temporal's workflow sandbox re-imports this package for every workflow
instance, so importing nothing here keeps each cached run small and its first task fast.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
"""The release, written here alone: the build reads it into the metadata `--version` shows."""

_EXPORTS = {
    "Agent": "waypoint.agent",
    "AgentNotFoundError": "waypoint.errors",
    "ApprovalPolicy": "waypoint.protocol.policy",
    "Condition": "waypoint.protocol.policy",
    "Bounds": "waypoint.protocol",
    "Rule": "waypoint.protocol.policy",
    "ContentError": "waypoint.errors",
    "DocumentBlock": "waypoint.protocol",
    "EffectNotApplied": "waypoint.errors",
    "Escalation": "waypoint.protocol",
    "HistoryBudget": "waypoint.protocol",
    "ImageBlock": "waypoint.protocol",
    "Limits": "waypoint.protocol",
    "ModelNotConfiguredError": "waypoint.errors",
    "ModelSettings": "waypoint.protocol",
    "RunNotFoundError": "waypoint.errors",
    "ScriptedModel": "waypoint.providers.scripted",
    "ServerNotReachableError": "waypoint.errors",
    "StepNotPendingError": "waypoint.errors",
    "StepOptions": "waypoint.protocol",
    "TextBlock": "waypoint.protocol",
    "Tool": "waypoint.tools",
    "ToolContext": "waypoint.tools",
    "ToolOptions": "waypoint.tools",
    "ToolOverride": "waypoint.protocol",
    "ToolDefinitionError": "waypoint.errors",
    "WaypointError": "waypoint.errors",
    "attachment": "waypoint.content",
    "build_worker": "waypoint.worker",
    "client_tool": "waypoint.client_tools",
    "connect": "waypoint.settings",
    "document": "waypoint.content",
    "final_answer": "waypoint.scripted",
    "image": "waypoint.content",
    "reply": "waypoint.scripted",
    "search_result": "waypoint.content",
    "text": "waypoint.scripted",
    "tool": "waypoint.tools",
    "tool_use": "waypoint.scripted",
}

__all__ = [
    "Agent",
    "AgentNotFoundError",
    "ApprovalPolicy",
    "Bounds",
    "Condition",
    "ContentError",
    "DocumentBlock",
    "EffectNotApplied",
    "Escalation",
    "HistoryBudget",
    "ImageBlock",
    "Limits",
    "ModelNotConfiguredError",
    "ModelSettings",
    "Rule",
    "RunNotFoundError",
    "ScriptedModel",
    "ServerNotReachableError",
    "StepNotPendingError",
    "StepOptions",
    "TextBlock",
    "Tool",
    "ToolContext",
    "ToolOptions",
    "ToolOverride",
    "ToolDefinitionError",
    "WaypointError",
    "attachment",
    "build_worker",
    "client_tool",
    "connect",
    "document",
    "final_answer",
    "image",
    "reply",
    "search_result",
    "text",
    "tool",
    "tool_use",
]

if TYPE_CHECKING:
    from waypoint.agent import Agent
    from waypoint.client_tools import client_tool
    from waypoint.content import attachment, document, image, search_result
    from waypoint.errors import (
        AgentNotFoundError,
        ContentError,
        EffectNotApplied,
        ModelNotConfiguredError,
        RunNotFoundError,
        ServerNotReachableError,
        StepNotPendingError,
        ToolDefinitionError,
        WaypointError,
    )
    from waypoint.protocol import (
        Bounds,
        DocumentBlock,
        Escalation,
        HistoryBudget,
        ImageBlock,
        Limits,
        ModelSettings,
        StepOptions,
        TextBlock,
        ToolOverride,
    )
    from waypoint.protocol.policy import ApprovalPolicy, Condition, Rule
    from waypoint.providers.scripted import ScriptedModel
    from waypoint.scripted import final_answer, reply, text, tool_use
    from waypoint.settings import connect
    from waypoint.tools import Tool, ToolContext, ToolOptions, tool
    from waypoint.worker import build_worker


def __getattr__(name: str) -> Any:
    """Import an export on first use."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'waypoint' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
