"""Everything Anthropic-specific: the client, request building, conversion, errors, limits.

Anthropic's SDK types never leave this package: the rest of Waypoint sees its own models.
Exports load lazily, as in `waypoint/__init__.py`: reading the worker's settings or the model
catalog must not import the SDK.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__all__ = [
    "BACKENDS",
    "CONTEXT_WINDOW_EXCEEDED",
    "DEFAULT_TIMEOUT",
    "AnthropicModel",
    "Backend",
    "ModelLimits",
    "build_client",
    "canonical_model_id",
    "is_known",
    "model_limits",
    "to_application_error",
]

_WHERE = {
    "BACKENDS": "waypoint._providers.claude.backends",
    "Backend": "waypoint._providers.claude.backends",
    "DEFAULT_TIMEOUT": "waypoint._providers.claude.backends",
    "ModelLimits": "waypoint._providers.claude.catalog",
    "canonical_model_id": "waypoint._providers.claude.catalog",
    "is_known": "waypoint._providers.claude.catalog",
    "model_limits": "waypoint._providers.claude.catalog",
    "build_client": "waypoint._providers.claude.client",
    "CONTEXT_WINDOW_EXCEEDED": "waypoint._providers.claude.errors",
    "to_application_error": "waypoint._providers.claude.errors",
    "AnthropicModel": "waypoint._providers.claude.provider",
}

if TYPE_CHECKING:
    from waypoint._providers.claude.backends import BACKENDS, DEFAULT_TIMEOUT, Backend
    from waypoint._providers.claude.catalog import (
        ModelLimits,
        canonical_model_id,
        is_known,
        model_limits,
    )
    from waypoint._providers.claude.client import build_client
    from waypoint._providers.claude.errors import CONTEXT_WINDOW_EXCEEDED, to_application_error
    from waypoint._providers.claude.provider import AnthropicModel


def __getattr__(name: str) -> Any:
    """Import an export on first use."""
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'waypoint._providers.claude' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
