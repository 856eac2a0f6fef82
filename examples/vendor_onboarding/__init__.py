"""The vendor-onboarding demo: documents in, sanctions screen, approved vendor record, email out.

Nothing is built at import: `agents()` builds the agent when the worker asks for it, so the
environment is read then and not when this package is imported.
"""

from __future__ import annotations

from examples.vendor_onboarding.agent import DEMO_TASK, build_agent, demo_dir_from_env
from examples.vendor_onboarding.script import SCRIPT
from examples.vendor_onboarding.tools import build_tools
from waypoint.agent import Agent

__all__ = ["DEMO_TASK", "SCRIPT", "agents", "build_agent", "build_tools", "demo_dir_from_env"]


def agents() -> list[Agent]:
    """The demo's agents, for `WAYPOINT_APP=examples.vendor_onboarding:agents` (the default)."""
    return [build_agent()]
