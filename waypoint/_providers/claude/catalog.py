"""What Waypoint knows about each Claude model: its context window and its output budget.

Pure data and lookups, no I/O. The figures come from Anthropic's model pages
(platform.claude.com, "Models overview" and each model's page, as read for this table); where
sources disagreed the smaller figure was kept, since a window guessed too large means a
"prompt is too long" error instead of a timely compaction, and an output budget guessed too
large means a 400 on the re-ask. Update the table when Anthropic publishes a new model; until
then an unknown model gets `DEFAULT_LIMITS`. The Models API (`max_input_tokens`,
`max_tokens`) is the live source when in doubt.

One function, `canonical_model_id`, maps every spelling of a model to the key used here and by
the price table: dated snapshots (`claude-sonnet-4-5-20250929`), Bedrock ids
(`us.anthropic.claude-sonnet-4-5-20250929-v1:0`, inference-profile ARNs) and Vertex ids
(`claude-sonnet-4-5@20250929`).
"""

from __future__ import annotations

import re
from typing import NamedTuple


class ModelLimits(NamedTuple):
    """How much a model reads and writes in one call, in tokens."""

    context_window: int
    max_output_tokens: int


DEFAULT_LIMITS = ModelLimits(200_000, 32_000)
"""For a model not in the table: the smallest window and output of any current model."""

_1M_128K = ModelLimits(1_000_000, 128_000)
_200K_64K = ModelLimits(200_000, 64_000)
_200K_32K = ModelLimits(200_000, 32_000)

MODELS: dict[str, ModelLimits] = {
    # Mythos class (Fable is the generally available one; Mythos shares its weights)
    "claude-fable-5-2": _1M_128K,
    "claude-mythos-5-2": _1M_128K,
    "claude-fable-5-1": _1M_128K,
    "claude-mythos-5-1": _1M_128K,
    "claude-fable-5": _1M_128K,
    "claude-mythos-5": _1M_128K,
    # Opus
    "claude-opus-5-5": _1M_128K,
    "claude-opus-5": _1M_128K,
    "claude-opus-4-8": _1M_128K,
    "claude-opus-4-7": _1M_128K,
    "claude-opus-4-6": _1M_128K,
    "claude-opus-4-5": _200K_64K,
    "claude-opus-4-1": _200K_32K,
    "claude-opus-4-0": _200K_32K,
    "claude-opus-4": _200K_32K,
    # Sonnet
    "claude-sonnet-5-5": _1M_128K,
    "claude-sonnet-5": _1M_128K,
    "claude-sonnet-4-6": ModelLimits(1_000_000, 64_000),  # 128K on a later page; 64K is safe
    "claude-sonnet-4-5": _200K_64K,  # its 1M window was a beta, since withdrawn
    "claude-sonnet-4-0": _200K_64K,
    "claude-sonnet-4": _200K_64K,
    "claude-3-7-sonnet": _200K_64K,
    # Haiku
    "claude-haiku-5-5": _1M_128K,
    "claude-haiku-4-5": _200K_64K,
    "claude-3-5-haiku": ModelLimits(200_000, 8_192),
}
"""Limits by canonical model id (see `canonical_model_id`)."""

_ARN_PREFIX = re.compile(r"^arn:[^/]*/")
_BEDROCK = re.compile(r"^(?:[a-z-]+\.)?anthropic\.(?P<model>.+?)(?:-v\d+(?::\d+)?)?$")
_SNAPSHOT_SUFFIX = re.compile(r"-(?:\d{8}|latest)$")


def canonical_model_id(model: str) -> str:
    """The model's id without platform decorations, date or version suffix.

    `us.anthropic.claude-sonnet-4-5-20250929-v1:0`, `claude-sonnet-4-5@20250929` and
    `claude-sonnet-4-5-20250929` are all `claude-sonnet-4-5`. Only a snapshot date (or
    `-latest`) is stripped, never a version: `claude-sonnet-5-5` stays itself.
    """
    name = _ARN_PREFIX.sub("", model.strip().lower())
    name = name.removesuffix("[1m]")
    if bedrock := _BEDROCK.match(name):
        name = bedrock["model"]
    name = name.partition("@")[0]
    return _SNAPSHOT_SUFFIX.sub("", name)


def model_limits(model: str) -> ModelLimits:
    """The model's context window and output budget; `DEFAULT_LIMITS` when unknown."""
    return MODELS.get(canonical_model_id(model), DEFAULT_LIMITS)


def is_known(model: str) -> bool:
    """True when the catalog has this model's limits rather than the defaults."""
    return canonical_model_id(model) in MODELS


_CLAUDE_3 = frozenset({"claude-3-haiku", "claude-3-opus", "claude-3-sonnet", "claude-3-5-sonnet"})
_BEFORE_4_5 = _CLAUDE_3 | {
    "claude-opus-4-1",
    "claude-opus-4-0",
    "claude-opus-4",
    "claude-sonnet-4-0",
    "claude-sonnet-4",
    "claude-3-7-sonnet",
    "claude-3-5-haiku",
}
SERVER_TOOLS_NOT_ON: dict[str, frozenset[str]] = {
    "web_search": _CLAUDE_3,
    "web_fetch": _CLAUDE_3,
    "code_execution": _CLAUDE_3,
    "tool_search_tool": _BEFORE_4_5 | {"claude-haiku-4-5"},
}
"""By server tool type prefix: the models Anthropic's tool pages do not list for it (tool
search: Opus 4.5 and Sonnet 4.5 onwards; the others from Haiku 3.5 and Sonnet 3.7 on). A model
missing here, a newer one included, is let through: the API's own 400 parks the run then."""


def server_tool_refusal(model: str, tool_type: str) -> str:
    """Why `model` cannot run the server tool of `tool_type`, or '' when it can (or may)."""
    canonical = canonical_model_id(model)
    for prefix, models in SERVER_TOOLS_NOT_ON.items():
        if tool_type.startswith(prefix) and canonical in models:
            return f"{model} does not support the server tool {tool_type}"
    return ""
