"""The procurement example: MCP catalogue, supplier-check sub-agent, question, policed order.

The buyer reads a supplier catalogue through an MCP server, delegates the supplier check to a
sub-agent, asks the requester to confirm, and places a purchase order under an approval policy.

Nothing is built at import: `agents()` builds the agents when the worker asks for them, so the
environment is read then. `--app examples.procurement:agents`.
"""

from __future__ import annotations

from examples.procurement.agent import ANSWER, SANCTIONED_TASK, TASK, build_agents
from waypoint import Agent

__all__ = ["ANSWER", "SANCTIONED_TASK", "TASK", "agents", "build_agents"]


def agents() -> list[Agent]:
    """The buyer and its sub-agent, both served by one worker."""
    return list(build_agents())
