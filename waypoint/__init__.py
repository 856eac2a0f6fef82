"""Waypoint: durable Claude agents on Temporal. A run resumes, never restarts.

Exports load lazily: Temporal's workflow sandbox re-imports this package for every workflow
instance, so importing nothing here keeps each cached run small and its first task fast.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "Agent": "waypoint.agent",
    "AgentNotFoundError": "waypoint.errors",
    "Escalation": "waypoint.models",
    "HistoryBudget": "waypoint.models",
    "Limits": "waypoint.models",
    "ModelNotConfiguredError": "waypoint.errors",
    "ModelSettings": "waypoint.models",
    "RunNotFoundError": "waypoint.errors",
    "ScriptedModel": "waypoint.scripted",
    "ServerNotReachableError": "waypoint.errors",
    "StepNotPendingError": "waypoint.errors",
    "StepOptions": "waypoint.models",
    "Tool": "waypoint.tools",
    "ToolContext": "waypoint.tools",
    "ToolDefinitionError": "waypoint.errors",
    "WaypointError": "waypoint.errors",
    "build_worker": "waypoint.worker",
    "connect": "waypoint.worker",
    "reply": "waypoint.scripted",
    "text": "waypoint.scripted",
    "tool": "waypoint.tools",
    "tool_use": "waypoint.scripted",
}

__all__ = [
    "Agent",
    "AgentNotFoundError",
    "Escalation",
    "HistoryBudget",
    "Limits",
    "ModelNotConfiguredError",
    "ModelSettings",
    "RunNotFoundError",
    "ScriptedModel",
    "ServerNotReachableError",
    "StepNotPendingError",
    "StepOptions",
    "Tool",
    "ToolContext",
    "ToolDefinitionError",
    "WaypointError",
    "build_worker",
    "connect",
    "reply",
    "text",
    "tool",
    "tool_use",
]

if TYPE_CHECKING:
    from waypoint.agent import Agent
    from waypoint.errors import (
        AgentNotFoundError,
        ModelNotConfiguredError,
        RunNotFoundError,
        ServerNotReachableError,
        StepNotPendingError,
        ToolDefinitionError,
        WaypointError,
    )
    from waypoint.models import Escalation, HistoryBudget, Limits, ModelSettings, StepOptions
    from waypoint.scripted import ScriptedModel, reply, text, tool_use
    from waypoint.tools import Tool, ToolContext, tool
    from waypoint.worker import build_worker, connect


def __getattr__(name: str) -> Any:
    """Import an export on first use."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'waypoint' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
