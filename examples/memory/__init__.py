"""A note keeper with Claude's memory tool: its files live in an object store and outlive a run.

Nothing is built at import: `agents()` builds the agent when the worker asks for it, so the
environment (where the memory lives) is read then. `--app examples.memory:agents`.
"""

from __future__ import annotations

from examples.memory.agent import NAME, NOTES, build_agent, memory_tool, store_from_env
from examples.memory.store import MemoryCommand, MemoryStore, Outcome
from waypoint import Agent

__all__ = [
    "NAME",
    "NOTES",
    "MemoryCommand",
    "MemoryStore",
    "Outcome",
    "agents",
    "build_agent",
    "memory_tool",
    "store_from_env",
]


def agents() -> list[Agent]:
    """The note keeper, over the memory `store_from_env` names."""
    return [build_agent()]
