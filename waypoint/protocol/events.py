"""The typed events a run streams: its steps, approvals, steers, states and end, and Claude's words.

Two channels, one vocabulary:
- **Lifecycle events** (`StepScheduled` ... `RunEnded`) are appended by the workflow to its
  `WorkflowStream` (topic `events`). They are derived from recorded state, so a replay rebuilds
  them at the same offsets: a reader resumes from any offset with no gap and no duplicate.
- **Live events** (`StepStarted`, `TextDelta`) come from the model activity as Claude writes.
  They go to a small per-step stream workflow, never into the run's history, and carry their
  own sequence number instead of a run offset.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

EVENTS_TOPIC = "events"
"""The run's lifecycle topic."""
DELTAS_TOPIC = "deltas"
"""A model step's live topic, on its own stream workflow."""


class _Event(BaseModel):
    model_config = ConfigDict(frozen=True)

    offset: int | None = Field(default=None, exclude=True)
    """Where the event sits in the run's stream (set by the reader; None for live events)."""

    @classmethod
    def of(cls, source: BaseModel, **more: Any) -> Self:
        """The event from the fields it shares with `source` (a ledger line, a state), `more`."""
        shared = set(cls.model_fields) - set(more) - {"type"}
        return cls(**source.model_dump(include=shared), **more)


class _StepEvent(_Event):
    """An event about one ledger line: the step, its kind and its tool."""

    step_id: str
    kind: str
    tool: str | None = None


class StepScheduled(_StepEvent):
    """A step was added to the ledger and is about to run."""

    type: Literal["step_scheduled"] = "step_scheduled"
    turn: int = 0


class StepStarted(_Event):
    """An attempt of a model step began on a worker (live only)."""

    type: Literal["step_started"] = "step_started"
    step_id: str
    attempt: int


class StepCompleted(_StepEvent):
    """A step finished; for a model step, what it said and what it cost."""

    type: Literal["step_completed"] = "step_completed"
    attempt: int = 0
    tokens: int = 0
    cost_usd: float | None = None
    stop_reason: str | None = None
    summary: str = ""
    text: str = ""
    """The model step's text (a late reader's copy of what was streamed)."""


class StepFailed(_StepEvent):
    """A step ended in error, was rejected, or was aborted."""

    type: Literal["step_failed"] = "step_failed"
    status: str
    summary: str = ""
    approved_not_run: bool = False
    """A person approved the call, then it was refused after all (a read it relied on changed,
    or the policy in force now denies it): `summary` says why."""


class ApprovalRequested(_Event):
    """A tool call waits for a person to approve exactly these arguments."""

    type: Literal["approval_requested"] = "approval_requested"
    step_id: str
    tool: str
    arguments: dict[str, Any]
    arguments_hash: str


Decision = Literal["approved", "rejected", "answered", "resolved"]


class ApprovalDecided(_Event):
    """A person (or a rule, or a timeout) decided a step that waited for one."""

    type: Literal["approval_decided"] = "approval_decided"
    step_id: str
    approved: bool
    """True only for an approval: a rejection, an answer or a resolution is not one."""
    decision: Decision | Literal[""] = ""
    """What was decided: an approval, a rejection, a client tool's answer, or a parked
    effect's resolution ("" from a run recorded before this field)."""
    decided_by: str
    decided_at: str = ""


class Steered(_Event):
    """A person steered the run: their message goes to the model at the next safe point."""

    type: Literal["steered"] = "steered"
    step_id: str
    """The operator step that records the steer."""
    decided_by: str
    decided_at: str = ""
    summary: str = ""
    """The message (its start), and what it cancels or waits for."""


class StateChanged(_Event):
    """The run's state changed; `parked` when it now waits for a person or a limit."""

    type: Literal["state_changed"] = "state_changed"
    state: str
    detail: str = ""
    parked: bool = False


class RunEnded(_Event):
    """The run finished (done or refused): the last lifecycle event."""

    type: Literal["run_ended"] = "run_ended"
    state: str
    output: str = ""
    turns: int = 0
    total_tokens: int = 0
    cost_usd: float = 0.0


class TextDelta(_Event):
    """A piece of Claude's text or thinking, as it was generated (live only)."""

    type: Literal["text_delta"] = "text_delta"
    step_id: str
    attempt: int
    kind: Literal["text", "thinking"] = "text"
    text: str
    seq: int = 0
    final: bool = False
    """The attempt's stream is complete (the text is empty)."""


RunEvent = Annotated[
    StepScheduled
    | StepStarted
    | StepCompleted
    | StepFailed
    | ApprovalRequested
    | ApprovalDecided
    | Steered
    | StateChanged
    | RunEnded
    | TextDelta,
    Field(discriminator="type"),
]
"""Any event `waypoint.client.runs.events` yields."""

run_event = TypeAdapter[RunEvent](RunEvent)
"""Parses one event (e.g. a line of `waypoint watch --json`)."""


def delta_stream_id(workflow_id: str, step_id: str) -> str:
    """The id of the stream workflow that carries one model step's live events."""
    return f"{workflow_id}/live/{step_id}"
