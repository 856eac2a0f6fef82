"""The vendor-onboarding demo: documents in, sanctions screen, approved vendor record, email out.

Nothing is built at import: `agents()` builds the agent when the worker asks for it, so the
environment is read then and not when this package is imported.
"""

from __future__ import annotations

from waypoint._agent import Agent
from waypoint.demo.agent import DEMO_TASK, build_agent, demo_dir_from_env
from waypoint.demo.script import SCRIPT
from waypoint.demo.tools import build_tools

__all__ = ["DEMO_TASK", "SCRIPT", "agents", "build_agent", "build_tools", "demo_dir_from_env"]


def agents() -> list[Agent]:
    """The demo's agents, for `WAYPOINT_APP=waypoint.demo:agents` (the default)."""
    return [build_agent()]
