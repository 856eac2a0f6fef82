"""Invariants of what must not happen at all: a reader's writes."""

from __future__ import annotations

from temporalio.api.history.v1 import HistoryEvent

READS = {"__temporal_workflow_stream_poll", "watch"}
"""What a reader once sent a run to follow it (a stream poll Update, a `watch` lease signal)."""


def reader_wrote(event: HistoryEvent) -> str | None:
    """What a reader wrote into the run's history, if this event is one: reading never writes."""
    if event.HasField("workflow_execution_update_accepted_event_attributes"):
        name = event.workflow_execution_update_accepted_event_attributes.accepted_request.input.name
    elif event.HasField("workflow_execution_signaled_event_attributes"):
        name = event.workflow_execution_signaled_event_attributes.signal_name
    else:
        return None
    return name if name in READS else None
