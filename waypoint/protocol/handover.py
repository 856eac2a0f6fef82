"""A turn a run handed to its next history segment while it waited (`workflows/handover.py`).

A run that waits for a person still takes signals and updates, each adding events; so a wait
races the history budget, and once it is reached the run continues-as-new mid-turn. What the
next segment needs to go on waiting where this one did rides in `AgentState.waiting_turn`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel

from waypoint.protocol.messages import ContentBlock, ToolResultBlock, ToolUseBlock

WaitKind = Literal[
    "approval", "answer", "paused", "limit", "model_unavailable", "request_invalid",
    "model_paused", "context_full", "model_limit", "resolution", "tool_changed", "held",
]  # fmt: skip
MODEL_WAITS = frozenset(
    {"model_unavailable", "request_invalid", "model_paused", "context_full", "model_limit"}
)
"""Waits of a model step: the next segment takes its turn up at that step."""
RUN_WAITS = frozenset({"paused", "limit", *MODEL_WAITS})
"""Waits of the run itself, outside any tool call: handed over only while nothing else runs."""


class OpenWait(BaseModel):
    """One wait in progress: what it waits for and how far it got."""

    kind: WaitKind
    """`approval`, `answer`: a person decides the call. `resolution`: an operator says what
    an unclear effect did. `tool_changed`: the call's tool changed (`resume`). `held`: a pause
    holds the call. `model_unavailable`, `request_invalid`: a model step parked so (`resume`);
    `model_paused`: a pause holds a model step before its call; `context_full`: a model step
    answered, but the transcript fills the context window with nothing left to compact (shown
    `model_unavailable`; `resume` asks again, `tN.model.c1`); `model_limit`: a model step
    whose worst case would cross a limit parks in `limit_reached` before its call (reserved
    again, then called, once a limit is raised). `paused`, `limit`:
    the run waits between turns, or a pause holds a reply before its calls start."""
    step_id: str = ""
    """The call or model step that waits; '' for the run's own wait (a pause, a limit)."""
    until: str = ""
    """When the wait in progress times out (ISO 8601, recorded clock); '' for never."""
    reminders: int = 0
    """Escalations sent so far: the next one is numbered from here."""
    route: str | None = None
    """The approval policy's route for the call when it was judged (`workflows/tool_gate.py`)."""
    approved: bool = False
    """A person approved the call already (it now waits for its answer): not asked again."""
    prepared: dict[str, Any] | None = None
    """A held or unclear call's `ToolPreparation` (its checked arguments), as JSON: the next
    segment does not check them again."""
    phase: int = 0
    """Where in its turn a model step waits: 0 its first call, 1 the call with the model's
    whole output budget, 1 + k the kth continuation (`model_steps.py`)."""
    max_tokens: int | None = None
    """The output budget the waiting model step asks for (None: the run's limit)."""
    compact: str = ""
    """The summary step (`tN.compact.ctx`) the model step waits for, parked in `kind`: the
    next segment parks it again, writes the summary once `resume` comes, then calls the step.
    With no `step_id`: the summary written between a turn and its continue-as-new
    (`tN.compact`), parked again and written before the next segment's first step."""


class WaitingTurn(BaseModel):
    """The reply whose calls were waiting, and what its finished calls answered."""

    calls: list[ToolUseBlock] = []
    """The reply's calls as reviewed; none when the run waited between turns."""
    feedback: list[ContentBlock] = []
    cut_off: bool = False
    results: dict[int, ToolResultBlock] = {}
    """Results of the calls that finished before the handover, by their place in the reply."""
    waits: list[OpenWait] = []
