"""Invariants of the notices a run sends the people it waits on (`workflows/notices.py`).

- `notice_once`: in each run's chain (across continue-as-new), a wait is told it waits, is
  escalated, and is told its end each under one key at most, and a key is never reused for
  another notice; the receivers accepted nothing that was never sent.
- `notice_beside`: no step waited for a delivery: no workflow task whose only news was a
  notice activity's end scheduled a step (a model call, a tool, a check), so a receiver that is
  slow or down never delays the run's steps. The run's close may wait for them, boundedly
  (`StepOptions.notice_drain`): that is not a step.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from waypoint._torture.evidence import decode_first
from waypoint.protocol.notices import NOTICE_PLAN, NOTIFY, NoticeRequest

NOTICE_ACTIVITIES = {NOTIFY, NOTICE_PLAN}
ONCE = ("waiting", "escalated", "decided", "timed_out")
"""The events a wait has at most one of (reminders come as often as their timer says)."""
E = EventType
CLOSED = {
    E.EVENT_TYPE_ACTIVITY_TASK_COMPLETED: "activity_task_completed_event_attributes",
    E.EVENT_TYPE_ACTIVITY_TASK_FAILED: "activity_task_failed_event_attributes",
    E.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT: "activity_task_timed_out_event_attributes",
    E.EVENT_TYPE_ACTIVITY_TASK_CANCELED: "activity_task_canceled_event_attributes",
}
COMMANDS = {
    E.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED,
    E.EVENT_TYPE_ACTIVITY_TASK_CANCEL_REQUESTED,
    E.EVENT_TYPE_TIMER_STARTED,
    E.EVENT_TYPE_TIMER_CANCELED,
    E.EVENT_TYPE_MARKER_RECORDED,
    E.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES,
    E.EVENT_TYPE_WORKFLOW_PROPERTIES_MODIFIED,
    E.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED,
    E.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED,
    E.EVENT_TYPE_REQUEST_CANCEL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED,
    E.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED,
    E.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_COMPLETED,
    E.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED,
    E.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED,
    E.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED,
    E.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW,
}
"""What a completed workflow task writes after it: its commands and its answers to updates."""
INNER_NEWS = {
    E.EVENT_TYPE_MARKER_RECORDED,  # a local activity's result came inside the task
    E.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED,  # an update is written only once accepted
}
NOT_NEWS = {
    E.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED,
    E.EVENT_TYPE_WORKFLOW_TASK_STARTED,
    E.EVENT_TYPE_WORKFLOW_TASK_COMPLETED,
    E.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT,
    E.EVENT_TYPE_WORKFLOW_TASK_FAILED,
    E.EVENT_TYPE_ACTIVITY_TASK_STARTED,
}


@dataclass
class Told:
    """One delivery a run scheduled: the notice's key, its channel, and what it says."""

    key: str
    channel: str
    event: str
    step_id: str
    since: str


async def told(client: Client, events: Iterable[Any]) -> list[Told]:
    """Every `waypoint.notify` activity the history scheduled."""
    found: list[Told] = []
    for event in events:
        if event.event_type != EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            continue
        attrs = event.activity_task_scheduled_event_attributes
        if attrs.activity_type.name != NOTIFY:
            continue
        request = await decode_first(client, attrs.input.payloads, NoticeRequest)
        if request is None:  # not a request this code can read: not evidence
            continue
        n = request.notice
        found.append(Told(n.key, request.channel, n.event, n.step_id, n.since))
    return found


def notice_once(chains: dict[tuple[str, str], list[list[Told]]], inbox: Path) -> list[str]:
    """`notice_once`, over each chain's deliveries (one list per execution) and the inbox."""
    found: list[str] = []
    sent: set[tuple[str, str]] = set()
    for (run, _), executions in chains.items():
        says: dict[tuple[str, str], tuple[str, str, str]] = {}
        keys: dict[tuple[str, str, str], set[str]] = {}
        for t in (t for ex in executions for t in ex):
            sent.add((t.key, t.channel))
            what = (t.event, t.step_id, t.since)
            if says.setdefault((t.key, t.channel), what) != what:
                was = says[(t.key, t.channel)]
                found.append(f"notice_once: {run} sent {t.key} as {what} and as {was}")
            if t.event in ONCE:
                keys.setdefault(what, set()).add(t.key)
        for (event, step_id, since), under in sorted(keys.items()):
            if len(under) > 1:
                found.append(
                    f"notice_once: {run} told {event} of {step_id} (waiting since {since}) "
                    f"under {len(under)} keys: {sorted(under)}"
                )
    runs = {run for run, _ in chains}
    for key, channel in _accepted(inbox):
        if key.split("/", 1)[0] in runs and (key, channel) not in sent:
            found.append(f"notice_once: {channel} accepted {key}, which no run sent")
    return found


def notice_beside(run: str, events: Iterable[Any]) -> list[str]:
    """`notice_beside` in one history: the steps a task scheduled on a delivery's end alone."""
    found: list[str] = []
    types: dict[int, str] = {}
    news: list[Any] = []  # what the next workflow task hears: events outside any task
    commands: list[Any] = []  # what the last completed task wrote
    in_task = False

    def judge() -> None:
        heard = [types.get(_scheduled(e), "") if e.event_type in CLOSED else "" for e in news]
        if not news or not all(h in NOTICE_ACTIVITIES for h in heard):
            return
        if any(c.event_type in INNER_NEWS for c in commands):
            return
        for c in commands:
            attrs = c.activity_task_scheduled_event_attributes
            if c.event_type == E.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED and (
                attrs.activity_type.name not in NOTICE_ACTIVITIES
            ):
                found.append(
                    f"notice_beside: {run} scheduled {attrs.activity_id} (event {c.event_id}) "
                    "when only a notice's delivery had ended"
                )

    for event in events:
        kind = event.event_type
        if kind == E.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            types[event.event_id] = (
                event.activity_task_scheduled_event_attributes.activity_type.name
            )
        if kind == E.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            in_task, commands = True, []
        elif in_task and kind in COMMANDS:
            commands.append(event)
        elif kind not in NOT_NEWS:
            if in_task:  # the task's commands are over: judge them by what it had heard
                judge()
                in_task, news = False, []
            news.append(event)
    if in_task:
        judge()
    return found


def _scheduled(event: Any) -> int:
    return getattr(event, CLOSED[event.event_type]).scheduled_event_id


def _accepted(inbox: Path) -> list[tuple[str, str]]:
    if not inbox.exists():
        return []
    with sqlite3.connect(inbox) as db:
        return db.execute("SELECT key, channel FROM inbox").fetchall()
