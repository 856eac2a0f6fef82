"""What a run remembers of its notices across restarts and continue-as-new.

Kept apart from `notices.py` (the contract with the delivery side) because only the workflow
reads it. Stdlib and pydantic only: workflow code imports it.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

from waypoint.protocol.notices import NoticeRequest


class NoticeWait(BaseModel):
    """One waiting step's notices: how many of each event went out, and what is in flight.

    Carried whole, so a wait handed to a new history segment neither tells anyone twice nor
    restarts its reminder and escalation clocks, and a delivery cut by the handover is started
    again under its own key (the receiver deduplicates on it).
    """

    kind: Literal["approval", "question"]
    since: str
    """When the current wait began (its `requested_at` / `asked_at`): every timer counts from it."""
    counts: dict[str, int] = {}
    """Event -> notices of it this step has had: the next one is `n = count + 1` in its key."""
    reminded: int = 0
    """Reminder slots of the current wait already passed (`since + k * remind_after`)."""
    escalated: bool = False
    """Whether the current wait was escalated."""
    told: list[str] = []
    """The roles the current wait's notices went to: its end is told to each."""
    ended: bool = False
    """The current wait ended and its end was told."""
    inflight: list[NoticeRequest] = []
    """Deliveries started and not reported yet."""
