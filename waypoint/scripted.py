"""Moved to `waypoint.testing`: this path works, with a warning, until the first release."""

from __future__ import annotations

import warnings

warnings.warn(
    "waypoint.scripted moved: import reply, text, tool_use, final_answer, last_tool_results "
    "and Script from waypoint.testing (this path goes at the first release)",
    DeprecationWarning,
    stacklevel=2,
)

from waypoint.providers.scripts import SCRIPTED_MODEL_ID, ScriptEntry  # noqa: E402
from waypoint.testing import (  # noqa: E402 - after the warning, which names the new path
    Script,
    final_answer,
    last_tool_results,
    reply,
    text,
    tool_use,
    web_search,
)

__all__ = [
    "SCRIPTED_MODEL_ID",
    "Script",
    "ScriptEntry",
    "final_answer",
    "last_tool_results",
    "reply",
    "text",
    "tool_use",
    "web_search",
]
