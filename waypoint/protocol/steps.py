"""Activity inputs and results: what the loop hands its model and tool steps."""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Literal

from pydantic import Field

from waypoint.protocol.base import _Frozen, _unset
from waypoint.protocol.billing import Usage
from waypoint.protocol.bounds import SizeLimits
from waypoint.protocol.messages import ContentBlock, Message, RichBlock
from waypoint.protocol.run import Container
from waypoint.protocol.spec import ModelSettings, ServerToolSpec, ToolSpec


class LoadSpecInput(_Frozen):
    """Ask the worker for the current definition of an agent."""

    agent: str
    provider: Literal["anthropic", "scripted"] | None = None
    """On a replan, keep the provider the run started with."""


class ModelRequest(_Frozen):
    """One Messages API call."""

    purpose: Literal["turn", "compact"] = "turn"
    """`compact`: summarise the older transcript before a continue-as-new."""
    step_id: str
    turn: int
    model: str
    provider: Literal["anthropic", "scripted"]
    agent: str
    system: str
    tools: list[ToolSpec]
    messages: list[Message]
    """Only the messages after `prefix_hash` when a prefix is named; else the whole transcript."""
    max_tokens: int
    prefix_hash: str = ""
    """Chain head of the messages the worker's transcript store already holds."""
    prefix_len: int = 0
    settings: ModelSettings = ModelSettings()
    bounds: SizeLimits | None = Field(default=None, exclude_if=_unset)
    """The agent's limits on a tool input, checked before the reply is recorded."""
    server_tools: list[ServerToolSpec] = Field(default=[], exclude_if=_unset)
    """Claude's server tools, sent after the agent's own."""
    container: str | None = Field(default=None, exclude_if=_unset)
    """The code-execution container to reuse (`AgentState.container`)."""


class ModelResponse(_Frozen):
    """The model's answer with what it cost."""

    content: list[ContentBlock]
    stop_reason: str
    stop_sequence: str | None = None
    """Which of the request's stop sequences ended the reply, for `stop_sequence`."""
    stop_details: str = ""
    """The API's explanation of a refusal (category and text), when it gives one."""
    usage: Usage = Usage()
    cost_usd: float | None = None
    """None when the model id is not in the price table."""
    model: str
    attempt: int = 1
    container: Container | None = Field(default=None, exclude_if=_unset)
    """The code-execution container the reply ran in, if any."""


MODEL_CANCELLED = "ModelStepCancelled"
"""The error type of a model step the run cancelled (a steer): its details are a `PartialSpend`."""


class PartialSpend(_Frozen):
    """What a cancelled model call spent before it stopped, as far as its provider can say."""

    usage: Usage = Usage()
    """The tokens the provider reported before the call was cancelled (may be none)."""
    cost_usd: float | None = None
    """None when the spend is not wholly known, or the model is not priced."""
    known: bool = False
    """Whether `usage` is all the call spent; False when part of it (the output so far) is not
    reported, e.g. Claude reports output tokens only when a reply ends."""
    attempt: int = 1


class ToolCall(_Frozen):
    """One tool step as the workflow schedules it."""

    agent: str
    step_id: str
    tool: str
    schema_hash: str
    arguments: dict[str, Any]
    effect_key: str | None = None
    run_id: str = ""
    workflow_id: str = ""
    reconcile_first: bool = False
    """Ask downstream before running even on attempt 1 (an operator's `retry`)."""
    reconcile_only: bool = False
    """Only ask downstream, never run: the effect's attempts ran out."""
    timeout: timedelta | None = None
    """An effect's own timeout, kept by the worker (the server's limit is longer)."""
    fresh: bool = Field(default=False, exclude_if=_unset)
    """The run holds this read `fresh_for` (its own, a worker's or the run's option): the
    worker dates the result as the read ends."""


class OutputCheck(_Frozen):
    """A `final_answer` call to validate against the agent's `output_type` on the worker."""

    agent: str
    step_id: str
    schema_hash: str
    """The hash of the output schema the run began with: a changed type is refused."""
    value: dict[str, Any]


class OutputVerdict(_Frozen):
    """The validated, normalised value, or what was wrong with it."""

    valid: bool
    value: dict[str, Any] | None = None
    errors: str = ""


class ToolPreparation(_Frozen):
    """Arguments checked and coerced before the policy, a person or the tool sees them."""

    valid: bool
    error: str = ""
    needs_approval: bool = False
    arguments: dict[str, Any] | None = None
    """The validated, coerced arguments the policy, the approval and the tool all see; None
    from a worker that predates them (the model's arguments stand)."""


class ToolOutcome(_Frozen):
    """A tool step's result, as it goes back to the model."""

    content: str | list[RichBlock]
    is_error: bool = False
    attempt: int = 1
    reconciled: bool = False
    """True when the effect was found already done downstream and not executed again."""
    read_at: str = Field(default="", exclude_if=lambda v: not v)
    """A `fresh_for` read: when its body returned, by the worker's clock (ISO 8601), recorded
    with the result so every durability mode dates each read as it ends."""
    basis: str = Field(default="", exclude_if=lambda v: not v)
    """A `fresh_for` read with a `fresh_key`: the sha256 of the part of its result that counts
    for "changed"; '' compares the whole result."""
