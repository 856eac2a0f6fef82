"""Waypoint: durable Claude agents on Temporal. A run resumes, never restarts."""

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
from waypoint.models import Escalation, HistoryBudget, Limits, StepOptions
from waypoint.scripted import ScriptedModel, reply, text, tool_use
from waypoint.tools import Tool, ToolContext, tool
from waypoint.worker import build_worker, connect

__all__ = [
    "Agent",
    "AgentNotFoundError",
    "Escalation",
    "HistoryBudget",
    "Limits",
    "ModelNotConfiguredError",
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
