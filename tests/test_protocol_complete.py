"""Every protocol model is complete when its module is imported.

A model naming a type defined further down its module is left incomplete by pydantic and
rebuilt on first use from the caller's namespace; inside Temporal's replay sandbox that fails
("`TypeAdapter[AgentSpec]` is not fully defined"), and no history of the model replays.
"""

from __future__ import annotations

import importlib
import pkgutil

from pydantic import BaseModel

import waypoint.protocol


def test_every_protocol_model_is_complete_at_import() -> None:
    incomplete = []
    for info in pkgutil.iter_modules(waypoint.protocol.__path__):
        module = importlib.import_module(f"waypoint.protocol.{info.name}")
        for value in vars(module).values():
            if (
                isinstance(value, type)
                and issubclass(value, BaseModel)
                and value.__module__ == module.__name__
                and not value.__pydantic_complete__
            ):
                incomplete.append(f"{module.__name__}.{value.__name__}")
    assert not incomplete, f"define what these name above them: {incomplete}"
