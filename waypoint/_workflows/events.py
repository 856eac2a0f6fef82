"""The run's lifecycle stream: typed events derived from the ledger and the state. Deterministic.

`sync()` compares the ledger and the run's state with what it last published and appends an
event for each change to the run's `WorkflowStream`. Workflow-side publishing writes nothing
to history (the log is rebuilt by replay at the same offsets), so the hooks in the loop are one
call each, and runs recorded before `waypoint-events` replay with the stream left empty.
The only history a stream costs is what its readers poll, bounded per turn.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TypeVar

from temporalio import workflow
from temporalio.contrib.workflow_streams import WorkflowStream, WorkflowStreamState

with workflow.unsafe.imports_passed_through():
    from waypoint.protocol import (
        APPROVED_NOT_RUN,
        AgentState,
        ContentBlock,
        StepRecord,
        TextBlock,
    )
    from waypoint.protocol.events import (
        EVENTS_TOPIC,
        ApprovalDecided,
        ApprovalRequested,
        Decision,
        RunEnded,
        StateChanged,
        Steered,
        StepCompleted,
        StepFailed,
        StepScheduled,
    )
    from waypoint.protocol.states import ENDED_STATES, PARKED_STATES, STEP_FAILED
    from waypoint.protocol.verbs import STEER

"""The `tool` of a steer's operator step (`waypoint._workflows.steering`)."""

T = TypeVar("T")


class RunEvents:
    """Publishes what changed in the run since the last `sync()`."""

    def __init__(self, s: AgentState, prior: WorkflowStreamState | None) -> None:
        self.s = s
        self.stream = WorkflowStream(prior)
        self.topic = self.stream.topic(EVENTS_TOPIC)
        # A continued run has published its past already: start from where it stood.
        self._seen = [_mark(r) for r in s.ledger]
        self._state = (s.state, s.detail)
        self._said: dict[str, str] = {}

    def sync(self) -> None:
        """Publish the ledger and state changes since the last call, in the order they happened."""
        s = self.s
        for i, record in enumerate(s.ledger):
            mark = _mark(record)
            before = self._seen[i] if i < len(self._seen) else None
            if mark == before:
                continue
            if before is None and record.kind == "operator" and record.tool == STEER:
                self._seen.append(mark)  # one event says who steered, when, and where to
                by, at = record.decided_by or "", record.decided_at or ""
                self.topic.publish(Steered.of(record, decided_by=by, decided_at=at))
                continue
            if before is None:
                self._seen.append(mark)
                self.topic.publish(StepScheduled.of(record, turn=s.turn))
                before = ("scheduled", None)
            self._seen[i] = mark
            self._step_changed(record, before[0], before[1])
        state = (s.state, s.detail)
        if state != self._state:
            self._state = state
            self.topic.publish(
                StateChanged(state=s.state, detail=s.detail, parked=s.state in PARKED_STATES)
            )
            if s.state in ENDED_STATES:
                self.topic.publish(RunEnded.of(s, turns=s.turn))

    def _step_changed(self, r: StepRecord, status: str, decided_by: str | None) -> None:
        if r.status == "awaiting_approval" and status != r.status:
            pending = self.s.pending.get(r.step_id)
            if pending is not None:
                self.topic.publish(ApprovalRequested.of(pending))
        if r.decided_by and r.decided_by != decided_by:
            decision = self._decision(r)
            self.topic.publish(
                ApprovalDecided(
                    step_id=r.step_id,
                    approved=decision == "approved",
                    decision=decision,
                    decided_by=r.decided_by,
                    decided_at=r.decided_at or "",
                )
            )
        if r.status == status:
            return
        if r.status == "completed":
            text = self._said.pop(r.step_id, "")  # a model step's, noted by `said`
            self.topic.publish(StepCompleted.of(r, text=text))
        elif r.status in STEP_FAILED:
            not_run = r.summary.startswith(APPROVED_NOT_RUN)
            self.topic.publish(StepFailed.of(r, approved_not_run=not_run))

    def _decision(self, r: StepRecord) -> Decision:
        """What the person (or rule, or timeout) who just stamped the step decided."""
        s = self.s
        outcome = s.decisions.get(r.step_id)
        if outcome is not None:
            return "approved" if outcome.approved else "rejected"
        if r.step_id in s.answers:
            return "answered"
        if r.step_id in s.resolutions or r.status == "needs_reconciliation":
            return "resolved"
        return "rejected" if r.status in STEP_FAILED else "approved"  # a policy rule's verdict

    async def ended(self, result: T) -> T:
        """Let readers drain before the run closes: a poll left waiting would be abandoned."""
        self.stream.detach_pollers()
        await workflow.wait_condition(workflow.all_handlers_finished)
        return result

    def detach(self) -> None:
        """Release long-polling readers before continue-as-new; they follow to the next run."""
        self.stream.detach_pollers()

    def state(self, keep: int) -> WorkflowStreamState:
        """The stream's last `keep` events for the next history segment.

        Late readers of a long run start there.
        """
        end = self.stream._on_offset()  # noqa: SLF001 - the stream's own offset query
        self.stream.truncate(max(0, end - keep))
        return self.stream.get_state(publisher_ttl=timedelta(minutes=15))


def _current() -> RunEvents | None:
    """The running workflow's publisher: the hooks in step code are one call each."""
    events = getattr(workflow.instance(), "events", None)
    return events if isinstance(events, RunEvents) else None


def sync() -> None:
    """Publish what changed, e.g. a step just added to the ledger."""
    events = _current()
    if events is not None:
        events.sync()


def said(step_id: str, content: list[ContentBlock]) -> None:
    """Note what a model step said, for its `StepCompleted` (a late reader's copy)."""
    events = _current()
    if events is not None:
        # One block a line, as the run's output joins them: "policy." and "No advisories"
        # are two blocks, never "policy.No advisories".
        events._said[step_id] = "\n".join(b.text for b in content if isinstance(b, TextBlock))  # noqa: SLF001


def _mark(r: StepRecord) -> tuple[str, str | None]:
    return (r.status, r.decided_by)
