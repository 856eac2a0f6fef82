"""Deterministic workflow code only: the agent loop and what it shows."""

from waypoint._workflows.agent import AgentWorkflow

__all__ = ["AgentWorkflow"]
