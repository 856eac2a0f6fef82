"""What a run was given and what each of its steps saw and did, read back from its recorded history.

Every history segment of the run's chain (continue-as-new) is read, newest first: the task and
its attachments, the spec's tools (what each does), each step's whole arguments and result
(payloads above the inline limit come back from the payload store through the client's data
converter, whole), what each model step said and searched, each step's latency in its
segment, and who stopped the run, when and why. History reads only: nothing here adds an event.
"""

from __future__ import annotations

import contextlib
import json
import re
from typing import Any

from pydantic import BaseModel, Field
from temporalio.api.enums.v1 import EventType
from temporalio.api.failure.v1 import Failure
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client

from waypoint.client import attachments, markers, replies
from waypoint.client.replies import Search
from waypoint.protocol import (
    AgentSpec,
    ModelResponse,
    RunInput,
    ToolCall,
    ToolOutcome,
    ToolPreparation,
)
from waypoint.protocol.spec import ToolSpec

MAX_SEGMENTS = 50
"""History segments read back at most, newest first (a note says when older ones are left)."""
PREVIEW_CHARS = 2000
"""Characters of a step's arguments or result a run's page holds; the rest is one click away."""


class StepEvidence(BaseModel):
    """What one step was given and gave back, and what happened on the way."""

    step_id: str
    segment: int = 0
    """Which history segment of the chain holds it (0 the first)."""
    arguments: str = ""
    """A tool step's whole arguments as JSON ('' when none were recorded)."""
    result: str = ""
    """A tool step's whole result (text, or JSON of rich blocks)."""
    is_error: bool = False
    words: str = ""
    """A model step's text."""
    searches: list[Search] = []
    citations: list[dict[str, str]] = []
    """A model step's cited sources: `title`, `url`, `cited_text`."""
    tries: list[str] = []
    """Each attempt that failed or was reconciled, in order: the reconcile evidence."""
    scheduled_at: float | None = None
    """Seconds since its segment started; the latest activity of the step."""
    started_at: float | None = None
    ended_at: float | None = None
    attempts: int = 0
    whole: bool = True
    """False when `arguments` or `result` was cut to `PREVIEW_CHARS` for a page (said there)."""
    arguments_chars: int = 0
    result_chars: int = 0

    def preview(self) -> StepEvidence:
        """This step with its arguments and result cut for a page, saying so (`whole`)."""
        cut = {
            name: value[:PREVIEW_CHARS]
            for name in ("arguments", "result")
            if len(value := getattr(self, name)) > PREVIEW_CHARS
        }
        sizes = {"arguments_chars": len(self.arguments), "result_chars": len(self.result)}
        return self.model_copy(update={**cut, **sizes, "whole": not cut})


class ToolNote(BaseModel):
    """A tool as the run's spec snapshot describes it, and what approving a call of it does."""

    name: str
    description: str
    kind: str
    on_approve: str


class Stopped(BaseModel):
    """Who stopped a run (or asked to), when, and why, from its history."""

    how: str
    """`cancel requested`, `terminated`, `failed` or `timed out`."""
    by: str = ""
    at: str = ""
    why: str = ""


class Segment(BaseModel):
    """One history segment of the run's chain."""

    index: int
    run_id: str
    started_at: str
    span: float = 0.0
    """Seconds from its start to its last step's end."""


class Evidence(BaseModel):
    """Everything a run's history says about what it was given and did."""

    task: str = ""
    attachments: list[str] = []
    """One line each: kind, media type, title, size."""
    given: list[Any] = Field(default=[], exclude=True)
    """The attachments' blocks themselves (`waypoint.client.attachments.opened`)."""
    tools: dict[str, ToolNote] = {}
    steps: dict[str, StepEvidence] = {}
    segments: list[Segment] = []
    stopped: Stopped | None = None
    note: str = ""
    """What could not be read, when something could not."""


def on_approve(tool: ToolSpec) -> str:
    """What approving a call of `tool` does next, in one sentence a person can act on."""
    if tool.runs_as == "child":
        return (
            f"Approving starts sub-agent {tool.child_agent!r} on these arguments; its own run "
            "is linked from this step."
        )
    if tool.kind == "effect":
        return (
            f"Approving runs {tool.name} once with exactly these arguments: it changes "
            "something outside (under its effect key, never twice). Rejecting runs nothing "
            "and tells the model why."
        )
    return (
        f"Approving runs {tool.name} ({tool.kind}: it changes nothing outside) with these "
        "arguments; the model reads its result. Rejecting tells the model why."
    )


async def read(client: Client, run: str, run_id: str = "") -> Evidence:
    """The evidence of `run` (its latest execution, or `run_id`), every segment read back."""
    found = Evidence()
    chain: list[tuple[str, list[HistoryEvent]]] = []
    segment: str | None = run_id
    try:
        while segment is not None and len(chain) < MAX_SEGMENTS:
            handle = client.get_workflow_handle(run, run_id=segment or None)
            events = [e async for e in handle.fetch_history_events()]
            started = events[0].workflow_execution_started_event_attributes
            chain.insert(0, (segment, events))
            segment = started.continued_execution_run_id or None
        if segment is not None:
            found.note = f"only the latest {MAX_SEGMENTS} history segments are shown"
    except Exception as err:  # noqa: BLE001 - what was read so far is still worth showing
        found.note = f"the run's history could not be read whole: {type(err).__name__}: {err}"
    reader = _Reader(client, found)
    for index, (segment_run_id, events) in enumerate(chain):
        await reader.segment(index, segment_run_id, events)
    return found


class _Reader:
    """Reads segments into one `Evidence`, decoding what each event holds."""

    def __init__(self, client: Client, found: Evidence) -> None:
        self.client = client
        self.found = found
        self.asked: set[str] = set()
        """Steps whose arguments are still the model's, from its reply."""

    async def decode(self, payloads: Any, kind: type[BaseModel]) -> Any:
        """One payload as `kind`; None if it cannot be read (said in the note)."""
        if not payloads.payloads:
            return None
        try:
            (value,) = await self.client.data_converter.decode(payloads.payloads, [kind])
            return value
        except Exception as err:  # noqa: BLE001 - another key, a blob gone: show the rest
            self.found.note = f"a payload could not be read: {type(err).__name__}: {err}"
            return None

    async def failure(self, failure: Failure) -> str:
        """A failure's message with its causes, decoded when the client holds the keys."""
        with contextlib.suppress(Exception):
            err: BaseException | None = await self.client.data_converter.decode_failure(failure)
            lines = []
            while err is not None and len(lines) < 4:
                lines.append(str(err) or type(err).__name__)
                err = err.__cause__
            return ": ".join(dict.fromkeys(line for line in lines if line))
        return failure.message

    def step(self, step_id: str, segment: int) -> StepEvidence:
        """The step's evidence, made on first sight; a later segment's sighting moves it there."""
        shown = self.found.steps.setdefault(step_id, StepEvidence(step_id=step_id))
        shown.segment = segment
        return shown

    async def segment(self, index: int, run_id: str, events: list[HistoryEvent]) -> None:
        """Read one segment: its input, its steps' activities, and how it was stopped."""
        origin = events[0].event_time.ToDatetime()
        segment = Segment(index=index, run_id=run_id, started_at=origin.isoformat())
        self.found.segments.append(segment)
        scheduled: dict[int, tuple[str, str, str]] = {}
        for event in events:
            at = (event.event_time.ToDatetime() - origin).total_seconds()
            await self._event(event, at, index, scheduled)
        ends = [s.ended_at or 0.0 for s in self.found.steps.values() if s.segment == index]
        segment.span = max(ends, default=0.0)

    async def _event(
        self, event: HistoryEvent, at: float, index: int, scheduled: dict[int, tuple[str, str, str]]
    ) -> None:
        kind = event.event_type
        if kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
            await self._input(event)
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attrs = event.activity_task_scheduled_event_attributes
            name, step_id = attrs.activity_type.name, attrs.activity_id.partition("#")[0]
            label = name.partition(".")[2]
            if name in ("waypoint.run_tool", "waypoint.prepare_tool"):
                call = await self.decode(attrs.input, ToolCall)
                step_id = call.step_id if call is not None else step_id
                if call is not None and (
                    not self.step(step_id, index).arguments or step_id in self.asked
                ):  # what the run validated, over what the model asked
                    self.step(step_id, index).arguments = _json(call.arguments)
                    self.asked.discard(step_id)
                if call is not None and (call.reconcile_only or call.reconcile_first):
                    label = "reconcile"
            scheduled[event.event_id] = (name, step_id, label)
            if name != "waypoint.prepare_tool":
                shown = self.step(step_id, index)
                shown.scheduled_at, shown.started_at, shown.ended_at = at, None, None
        elif kind in ENDS or kind == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            await self._activity(event, at, index, scheduled)
        elif kind == EventType.EVENT_TYPE_MARKER_RECORDED:
            await self._local(event, at, index)
        elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCEL_REQUESTED:
            attrs = event.workflow_execution_cancel_requested_event_attributes
            self.found.stopped = _cancel(attrs.cause, attrs.identity, _when(event))
        elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED:
            attrs = event.workflow_execution_terminated_event_attributes
            why = attrs.reason or "no reason given"
            self.found.stopped = Stopped(
                how="terminated", by=attrs.identity, at=_when(event), why=why
            )
        elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED:
            why = await self.failure(event.workflow_execution_failed_event_attributes.failure)
            self.found.stopped = Stopped(how="failed", at=_when(event), why=why)
        elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TIMED_OUT:
            why = "the run's execution timeout passed"
            self.found.stopped = Stopped(how="timed out", at=_when(event), why=why)

    async def _local(self, event: HistoryEvent, at: float, index: int) -> None:
        """A tool step run as a local activity: result and times from its marker."""
        ran = markers.local_run(event)
        if ran is None or ran.activity != "waypoint.run_tool":
            return
        shown = self.step(ran.step_id, index)
        shown.scheduled_at = shown.started_at = at - ran.scheduled
        shown.ended_at, shown.attempts = at - ran.ended, ran.attempt
        attrs = event.marker_recorded_event_attributes
        if attrs.HasField("failure"):
            why = await self.failure(attrs.failure)
            shown.tries.append(f"run_tool (local), attempt {ran.attempt}, failed: {why}")
        elif "result" in attrs.details:
            await self._result("waypoint.run_tool", ran.step_id, index, attrs.details["result"])

    async def _input(self, event: HistoryEvent) -> None:
        given = await self.decode(event.workflow_execution_started_event_attributes.input, RunInput)
        if given is None:
            return
        self.found.task = given.task
        self.found.given = list(given.attachments)
        self.found.attachments = [attachments.describe(block) for block in given.attachments]
        if given.resume is not None and given.resume.spec is not None:
            self._spec(given.resume.spec)

    def _spec(self, spec: AgentSpec) -> None:
        self.found.tools = {
            t.name: ToolNote(
                name=t.name, description=t.description, kind=t.kind, on_approve=on_approve(t)
            )
            for t in spec.tools
        }

    async def _activity(
        self, event: HistoryEvent, at: float, index: int, scheduled: dict[int, tuple[str, str, str]]
    ) -> None:
        kind = event.event_type
        attrs = getattr(event, f"{ENDS.get(kind, 'activity_task_started')}_event_attributes")
        name, step_id, label = scheduled.get(attrs.scheduled_event_id, ("", "", ""))
        if not name:
            return
        if kind == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            shown = self.step(step_id, index)
            if attrs.attempt > 1 and attrs.HasField("last_failure"):  # the only record of it
                why = await self.failure(attrs.last_failure)
                shown.tries.append(f"{label}, attempt {attrs.attempt - 1}, failed: {why}")
            if name != "waypoint.prepare_tool":
                shown.started_at, shown.attempts = at, attrs.attempt
            return
        if kind == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            await self._result(name, step_id, index, attrs.result)
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED:
            shown = self.step(step_id, index)
            why = await self.failure(attrs.failure)
            shown.tries.append(f"{label}, attempt {shown.attempts or 1}, failed: {why}")
        else:
            what = (
                "timed out" if kind == EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT else "stopped"
            )
            self.step(step_id, index).tries.append(f"{label} {what}")
        if name != "waypoint.prepare_tool":
            self.step(step_id, index).ended_at = at

    async def _result(self, name: str, step_id: str, index: int, result: Any) -> None:
        shown = self.step(step_id, index)
        if name == "waypoint.load_spec":
            spec = await self.decode(result, AgentSpec)
            if spec is not None:
                self._spec(spec)
        elif name == "waypoint.prepare_tool":
            prepared = await self.decode(result, ToolPreparation)
            if prepared is not None and prepared.arguments is not None:
                shown.arguments = _json(prepared.arguments)
        elif name == "waypoint.run_tool":
            outcome = await self.decode(result, ToolOutcome)
            if outcome is not None:
                shown.result = (
                    outcome.content
                    if isinstance(outcome.content, str)
                    else _json([b.model_dump(mode="json") for b in outcome.content])
                )
                shown.is_error = outcome.is_error
                if outcome.reconciled:
                    shown.tries.append("reconciled: found done downstream, not run again")
        elif name == "waypoint.call_model":
            response = await self.decode(result, ModelResponse)
            if response is not None:
                said = replies.said(response)
                shown.words, shown.searches, shown.citations = (
                    said.words,
                    said.searches,
                    said.citations,
                )
                for tool_step, arguments in replies.calls(step_id, response).items():
                    if not self.step(tool_step, index).arguments:
                        self.step(tool_step, index).arguments = _json(arguments)
                        self.asked.add(tool_step)


ENDS = {
    EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED: "activity_task_completed",
    EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED: "activity_task_failed",
    EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT: "activity_task_timed_out",
    EventType.EVENT_TYPE_ACTIVITY_TASK_CANCELED: "activity_task_canceled",
}
"""The events that end an activity, and the attributes naming its scheduled event."""
CANCELLED_BY = re.compile(r"cancelled by (?P<by>.+?): (?P<why>.*)", re.S)
"""How `waypoint.client.verbs.cancel` words the reason it sends."""


def _cancel(cause: str, identity: str, at: str) -> Stopped:
    said = CANCELLED_BY.fullmatch(cause)
    if said:
        return Stopped(how="cancel requested", by=said["by"], at=at, why=said["why"])
    return Stopped(how="cancel requested", by=identity, at=at, why=cause or "no reason given")


def _when(event: HistoryEvent) -> str:
    return event.event_time.ToDatetime().replace(microsecond=0).isoformat() + "Z"


def _json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False)
