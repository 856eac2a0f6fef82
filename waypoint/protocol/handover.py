"""A turn a run handed to its next history segment while it waited (`workflows/handover.py`).

A run that waits for a person still takes signals and updates, each adding events; so a wait
races the history budget, and once it is reached the run continues-as-new mid-turn. What the
next segment needs to go on waiting where this one did rides in `AgentState.waiting_turn`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

from waypoint.protocol.messages import ContentBlock, ToolResultBlock, ToolUseBlock


class OpenWait(BaseModel):
    """One wait in progress: what it waits for and how far it got."""

    kind: Literal["approval", "answer", "paused", "limit"]
    step_id: str = ""
    """The call that waits; '' for the run's own wait (a pause, a limit)."""
    until: str = ""
    """When the wait in progress times out (ISO 8601, recorded clock); '' for never."""
    reminders: int = 0
    """Escalations sent so far: the next one is numbered from here."""
    route: str | None = None
    """The approval policy's route for the call when it was judged (`workflows/tool_gate.py`)."""
    approved: bool = False
    """A person approved the call already (it now waits for its answer): not asked again."""


class WaitingTurn(BaseModel):
    """The reply whose calls were waiting, and what its finished calls answered."""

    calls: list[ToolUseBlock] = []
    """The reply's calls as reviewed; none when the run waited between turns."""
    feedback: list[ContentBlock] = []
    cut_off: bool = False
    results: dict[int, ToolResultBlock] = {}
    """Results of the calls that finished before the handover, by their place in the reply."""
    waits: list[OpenWait] = []
