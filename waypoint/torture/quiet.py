"""Invariants of what must not happen at all: a paused run's steps, a reader's writes."""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import datetime

from temporalio.api.history.v1 import HistoryEvent

from waypoint.protocol import RunResult
from waypoint.protocol.verbs import PAUSE, UNPAUSE
from waypoint.torture.evidence import Execution


def paused_still(results: Mapping[str, RunResult], executions: list[Execution]) -> list[str]:
    """`paused_still`: a run paused (its `pause` line) scheduled no step until its `unpause`."""
    found: list[str] = []
    for run, result in results.items():
        held: list[float] = []
        for r in result.ledger:
            if r.kind == "operator" and r.tool in (PAUSE, UNPAUSE) and r.decided_at:
                if (r.tool == PAUSE) == (len(held) % 2 == 0):
                    held.append(datetime.fromisoformat(r.decided_at).timestamp())
        held += [math.inf] * (len(held) % 2)
        windows = list(zip(held[::2], held[1::2], strict=True))
        for ex in (e for e in executions if e.workflow_id == run):
            for step_id, at in [
                *((s.step_id, s.scheduled) for s in ex.sent),
                *((s.step_id, s.scheduled) for s in ex.tools),
            ]:
                if any(start < at < end for start, end in windows):
                    found.append(f"paused_still: {run} scheduled {step_id} while paused")
    return found


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
