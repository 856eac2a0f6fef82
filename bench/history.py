"""Reading a run's history: payload sizes per activity, event counts and a per-step timeline."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client

E = EventType


async def fetch(client: Client, workflow_id: str) -> list[HistoryEvent]:
    """Every event of the run's latest history segment."""
    handle = client.get_workflow_handle(workflow_id)
    return [event async for event in handle.fetch_history_events()]


def elapsed_ms(a: HistoryEvent, b: HistoryEvent) -> float:
    return (b.event_time.ToNanoseconds() - a.event_time.ToNanoseconds()) / 1e6


def activity_sizes(events: list[HistoryEvent]) -> list[tuple[int, int]]:
    """(input bytes, result bytes) of each activity, in the order they were scheduled."""
    inputs: dict[int, int] = {}
    sizes: list[tuple[int, int]] = []
    for ev in events:
        if ev.event_type == E.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            inputs[ev.event_id] = ev.activity_task_scheduled_event_attributes.input.ByteSize()
        elif ev.event_type == E.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            done = ev.activity_task_completed_event_attributes
            sizes.append((inputs[done.scheduled_event_id], done.result.ByteSize()))
    return sizes


@dataclass(frozen=True)
class Anatomy:
    """What one step costs in history: events, workflow tasks, bytes, markers, upserts."""

    steps: int
    events: int
    workflow_tasks: int
    upserts: int
    markers: int
    history_bytes: int
    input_bytes: float
    result_bytes: float

    def per_step(self, value: float) -> float:
        """`value` divided by the number of steps."""
        return value / max(1, self.steps)


def anatomy(events: list[HistoryEvent], steps: int) -> Anatomy:
    """Count what a run's history holds; `steps` is how many steps the run took."""
    kinds = Counter(ev.event_type for ev in events)
    sizes = activity_sizes(events)
    n = max(1, len(sizes))
    return Anatomy(
        steps=steps,
        events=len(events),
        workflow_tasks=kinds[E.EVENT_TYPE_WORKFLOW_TASK_COMPLETED],
        upserts=kinds[E.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES],
        markers=kinds[E.EVENT_TYPE_MARKER_RECORDED],
        history_bytes=sum(ev.ByteSize() for ev in events),
        input_bytes=sum(i for i, _ in sizes) / n,
        result_bytes=sum(o for _, o in sizes) / n,
    )


PHASES = (
    "activity queued (scheduled -> started)",
    "activity runs (started -> completed)",
    "workflow task queued (completed -> task started)",
    "workflow task runs (task started -> task completed)",
)


def timeline(events: list[HistoryEvent]) -> dict[str, list[float]]:
    """Milliseconds each step spends in each phase, from the server's event times.

    A step is an activity plus the workflow task that reacts to its result and schedules the next.
    """
    phases: dict[str, list[float]] = {p: [] for p in PHASES}
    by_id = {ev.event_id: ev for ev in events}
    for i, ev in enumerate(events):
        if ev.event_type != E.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            continue
        done = ev.activity_task_completed_event_attributes
        scheduled, started = by_id[done.scheduled_event_id], by_id[done.started_event_id]
        phases[PHASES[0]].append(elapsed_ms(scheduled, started))
        phases[PHASES[1]].append(elapsed_ms(started, ev))
        task_started = next(
            (e for e in events[i:] if e.event_type == E.EVENT_TYPE_WORKFLOW_TASK_STARTED), None
        )
        task_done = next(
            (e for e in events[i:] if e.event_type == E.EVENT_TYPE_WORKFLOW_TASK_COMPLETED), None
        )
        if task_started is not None and task_done is not None:
            phases[PHASES[2]].append(elapsed_ms(ev, task_started))
            phases[PHASES[3]].append(elapsed_ms(task_started, task_done))
    return phases
