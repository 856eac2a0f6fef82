"""Waypoint: durable Claude agents on Temporal. A run resumes, never restarts.

What a program writes is here: agents and their tools, limits and policies, content, the
client's entry points (`connect`, and `runs` for starting, deciding and reading runs), the
worker and its Temporal plugin, and every error a client call raises. Offline scripts and the
kill test are in `waypoint.testing`; every other module is an internal and may move.

The `TYPE_CHECKING` block below is the one list of exports: type checkers and the docs read
it, and `__getattr__` derives from it which module holds each name. Nothing is imported until a
name is used: Temporal's workflow sandbox re-imports this package for every workflow instance,
so importing nothing here keeps each cached run small and its first task fast.
"""

from __future__ import annotations

import ast
import functools
import importlib
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
"""The release, written here alone: the build reads it into the metadata `--version` shows."""

if TYPE_CHECKING:
    from waypoint._agent import Agent as Agent
    from waypoint._client_tools import ClientTool as ClientTool
    from waypoint._client_tools import client_tool as client_tool
    from waypoint._content import attachment as attachment
    from waypoint._content import document as document
    from waypoint._content import image as image
    from waypoint._content import search_result as search_result
    from waypoint._plugin import WaypointPlugin as WaypointPlugin
    from waypoint._plugin import WorkerOptions as WorkerOptions
    from waypoint._tools import Tool as Tool
    from waypoint._tools import ToolContext as ToolContext
    from waypoint._tools import ToolOptions as ToolOptions
    from waypoint._tools import tool as tool
    from waypoint._worker import build_worker as build_worker
    from waypoint.client import runs as runs
    from waypoint.errors import AgentNotFoundError as AgentNotFoundError
    from waypoint.errors import AgentNotHostedError as AgentNotHostedError
    from waypoint.errors import ContentError as ContentError
    from waypoint.errors import DecisionKeyError as DecisionKeyError
    from waypoint.errors import DecisionRefusedError as DecisionRefusedError
    from waypoint.errors import DeployError as DeployError
    from waypoint.errors import EffectNotApplied as EffectNotApplied
    from waypoint.errors import EncryptionKeyError as EncryptionKeyError
    from waypoint.errors import ModelNotConfiguredError as ModelNotConfiguredError
    from waypoint.errors import NotifyConfigError as NotifyConfigError
    from waypoint.errors import PayloadDecryptionError as PayloadDecryptionError
    from waypoint.errors import PriceFileError as PriceFileError
    from waypoint.errors import ProfileError as ProfileError
    from waypoint.errors import RunClosedError as RunClosedError
    from waypoint.errors import RunIdTakenError as RunIdTakenError
    from waypoint.errors import RunNotFoundError as RunNotFoundError
    from waypoint.errors import RunStuckError as RunStuckError
    from waypoint.errors import SearchAttributesMissingError as SearchAttributesMissingError
    from waypoint.errors import ServerNotReachableError as ServerNotReachableError
    from waypoint.errors import SettingsError as SettingsError
    from waypoint.errors import StepNotPendingError as StepNotPendingError
    from waypoint.errors import StoreConfigError as StoreConfigError
    from waypoint.errors import StoredPayloadError as StoredPayloadError
    from waypoint.errors import StoreUnavailableError as StoreUnavailableError
    from waypoint.errors import ToolDefinitionError as ToolDefinitionError
    from waypoint.errors import ToolReportedError as ToolReportedError
    from waypoint.errors import WaypointError as WaypointError
    from waypoint.protocol import DocumentBlock as DocumentBlock
    from waypoint.protocol import Escalation as Escalation
    from waypoint.protocol import HistoryLimits as HistoryLimits
    from waypoint.protocol import HistoryOverride as HistoryOverride
    from waypoint.protocol import ImageBlock as ImageBlock
    from waypoint.protocol import Limits as Limits
    from waypoint.protocol import LimitsOverride as LimitsOverride
    from waypoint.protocol import ModelSettings as ModelSettings
    from waypoint.protocol import SizeLimits as SizeLimits
    from waypoint.protocol import StepOptions as StepOptions
    from waypoint.protocol import TextBlock as TextBlock
    from waypoint.protocol import ToolOverride as ToolOverride
    from waypoint.protocol.policy import ApprovalPolicy as ApprovalPolicy
    from waypoint.protocol.policy import Condition as Condition
    from waypoint.protocol.policy import Rule as Rule
    from waypoint.settings import connect as connect

_MOVED = {
    "Bounds": "waypoint.SizeLimits",
    "HistoryBudget": "waypoint.HistoryLimits",
    "ScriptedModel": "waypoint.testing.ScriptedModel",
    "final_answer": "waypoint.testing.final_answer",
    "reply": "waypoint.testing.reply",
    "text": "waypoint.testing.text",
    "tool_use": "waypoint.testing.tool_use",
}
"""Names that were here before, and where they are now: each warns once, until the first
release."""


@functools.cache
def _exports() -> dict[str, tuple[str, str]]:
    """Each name the `TYPE_CHECKING` block imports: its module, and its name there."""
    tree = ast.parse(Path(__file__).read_text(encoding="utf-8"))
    (block,) = [
        node
        for node in tree.body
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"
    ]
    return {
        alias.asname or alias.name: (node.module or "", alias.name)
        for node in block.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }


def _load(module: str, name: str) -> Any:
    """`name` from `module`: an attribute, or a submodule (`waypoint.client.runs`)."""
    holder = importlib.import_module(module)
    try:
        return getattr(holder, name)
    except AttributeError:
        return importlib.import_module(f"{module}.{name}")


def __getattr__(name: str) -> Any:
    """Import an export on first use; an old name warns once, then is kept here."""
    if name == "__all__":
        return sorted(_exports())
    if name in _MOVED:
        path = _MOVED[name]
        warnings.warn(
            f"waypoint.{name} is now {path}; the old name goes at the first release",
            DeprecationWarning,
            stacklevel=2,
        )
        globals()[name] = value = _load(*path.rsplit(".", 1))
        return value
    if name.startswith("_") or name not in _exports():  # `_x`: a module, found by import
        raise AttributeError(f"module 'waypoint' has no attribute {name!r}")
    return _load(*_exports()[name])


def __dir__() -> list[str]:
    """The exports beside what the package holds already."""
    return sorted({*globals(), *_exports()})
