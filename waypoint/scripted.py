"""Moved to `waypoint.testing`: this path works, with a warning, until the first release."""

from __future__ import annotations

import warnings

warnings.warn(
    "waypoint.scripted moved: import reply, text, tool_use, final_answer, last_tool_results "
    "and Script from waypoint.testing (this path goes at the first release)",
    DeprecationWarning,
    stacklevel=2,
)

from waypoint._providers.scripts import *  # noqa: E402, F403 - the old module's names, as they were
