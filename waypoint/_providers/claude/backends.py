"""The ways to reach Claude, and what each needs installed; light enough for `worker.py`.

Which one is Waypoint's configuration (`WAYPOINT_CLAUDE`, read in `worker.py`). This module
imports no SDK, so reading the settings does not load `anthropic`.
"""

from __future__ import annotations

import importlib.util
from typing import Literal

from waypoint.errors import ModelNotConfiguredError

Backend = Literal["anthropic", "bedrock", "vertex"]
BACKENDS: tuple[Backend, ...] = ("anthropic", "bedrock", "vertex")

DEFAULT_TIMEOUT = 600.0
"""Seconds the client waits on a connection or between streamed chunks (the SDK's default)."""

_EXTRAS: dict[str, tuple[str, str]] = {
    # backend: (module it needs, Waypoint extra that installs it)
    "bedrock": ("botocore", "bedrock"),  # request signing and the AWS event-stream decoder
    "vertex": ("google.auth", "vertex"),  # application default credentials
}


def require_backend(backend: str) -> None:
    """Raise a one-line error when the backend is unknown or its extra is not installed."""
    if backend not in BACKENDS:
        raise ModelNotConfiguredError(
            f"WAYPOINT_CLAUDE={backend!r} is not a way to reach Claude: "
            f"use one of {', '.join(BACKENDS)}"
        )
    if backend not in _EXTRAS:
        return
    module, extra = _EXTRAS[backend]
    if not _installed(module):
        raise ModelNotConfiguredError(
            f"WAYPOINT_CLAUDE={backend} needs the {extra!r} extra: "
            f"pip install 'waypoint-agents[{extra}]'"
        )


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # the parent package is missing
        return False
