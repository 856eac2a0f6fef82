"""Old paths of modules that moved to `waypoint._*`: each warns once, until the first release."""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable
from typing import Any

_WARNED: set[str] = set()


def old_path(old: str) -> Callable[[str], Any]:
    """The module `__getattr__` of an old path: the first use warns, every use works."""
    new = old.replace("waypoint.", "waypoint._", 1)

    def attribute(name: str) -> Any:
        if old not in _WARNED:
            _WARNED.add(old)
            warnings.warn(
                f"{old} is internal now ({new}): import its names from waypoint",
                DeprecationWarning,
                stacklevel=2,
            )
        return getattr(importlib.import_module(new), name)

    return attribute
