"""Temporal's local-activity markers, read back: which step ran, when, and its attempt.

A tool step run as a local activity (`durability="turn"`) has no activity events; the SDK
records a `core_local_activity` marker instead, whose `data` detail is JSON naming the
activity (its id, type, attempt, times) and whose `result` detail is its result payload.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from temporalio.api.history.v1 import HistoryEvent

LOCAL_MARKER = "core_local_activity"


@dataclass(frozen=True)
class LocalRun:
    """One local activity's record."""

    activity: str
    step_id: str
    attempt: int
    scheduled: float
    """Seconds before the marker was recorded that it was first scheduled."""
    ended: float
    """Seconds before the marker was recorded that it completed."""


def local_run(event: HistoryEvent) -> LocalRun | None:
    """The local activity a marker event records; None for any other marker (or a torn one)."""
    attrs = event.marker_recorded_event_attributes
    data = attrs.details.get("data") if attrs.marker_name == LOCAL_MARKER else None
    try:
        said = json.loads(data.payloads[0].data) if data and data.payloads else None
    except ValueError:
        return None
    if not isinstance(said, dict):
        return None
    recorded = event.event_time.ToDatetime()
    return LocalRun(
        activity=str(said.get("activity_type", "")),
        step_id=str(said.get("activity_id", "")).partition("#")[0],
        attempt=int(said.get("attempt") or 1),
        scheduled=_before(said.get("original_schedule_time"), recorded),
        ended=_before(said.get("complete_time"), recorded),
    )


def _before(stamp: Any, recorded: datetime) -> float:
    if not isinstance(stamp, dict):
        return 0.0
    seconds = int(stamp.get("seconds") or 0) + int(stamp.get("nanos") or 0) / 1e9
    when = datetime.fromtimestamp(seconds, UTC).replace(tzinfo=None)
    return max((recorded - when).total_seconds(), 0.0)
