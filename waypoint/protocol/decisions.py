"""What people send a run and what it waits for them on: approvals, answers, corrections, steers."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from waypoint.protocol.base import _Frozen, _Sent, _unset, _WaitingCall
from waypoint.protocol.signatures import DecisionId, Signed


class Escalation(_WaitingCall):
    """The arguments an escalation tool receives when an approval waits too long."""

    waited_seconds: float
    reminder: int
    """0 for the first escalation, then 1, 2, ... for each reminder."""


class PendingApproval(_WaitingCall):
    """A tool call waiting for a person, bound to the exact arguments they review."""

    arguments_hash: str
    requested_at: str
    rule: str | None = Field(default=None, exclude_if=_unset)
    """The approval-policy rule that asked, when a policy did (not the tool's own setting)."""


class PendingQuestion(_WaitingCall):
    """A call of a client-answered tool, waiting for a client to answer it."""

    asked_at: str
    answer_schema: dict[str, Any] | None = Field(default=None, exclude_if=_unset)
    """The JSON schema an answer must fit, so whoever answers can see its shape."""


class ClientAnswer(_Sent):
    """The payload of the `answer` signal and update: a client's result for a pending question."""

    step_id: str
    result: dict[str, Any]
    """Must fit the tool's output schema, or the answer is refused and the run keeps waiting."""
    sender: str = "unknown"
    identity: str = ""
    """The sending Temporal client's identity, recorded with the answer."""
    decision_id: DecisionId = ""
    signature: Signed = None


class ApprovalDecision(_Sent):
    """The payload of the `approve` and `reject` signals and updates."""

    step_id: str
    reviewer: str = "unknown"
    reason: str = ""
    arguments_hash: str | None = None
    """Must match the pending approval's hash (the CLI fills it in): a stale or blind
    approval is refused, unless the agent opted out with `approval_hash="optional"`."""
    identity: str = ""
    """The sending Temporal client's identity (`Client.identity`), recorded with the decision."""
    remember: Literal["", "tool", "args"] = ""
    """Approve and remember for this run: every later call of the tool, or of these arguments."""
    decision_id: DecisionId = ""
    signature: Signed = None


APPROVED_NOT_RUN = "approved, but not run: "
"""How the ledger line of an approved call that was then refused starts (a read it relied on
changed, or the policy in force now denies it)."""


class ResumeRequest(_Sent):
    """The `resume` signal: retry a parked step (`model_unavailable`, `tool_changed`, ...)."""

    reviewer: str = "unknown"
    reason: str = ""
    replan: bool = False
    """For a step parked in `tool_changed`: tell the model its tool changed and update the
    run's plan to the new tools (nothing else of the build), instead of running the step again
    (after a rollback)."""
    identity: str = Field(default="", exclude_if=_unset)
    decision_id: DecisionId = ""
    signature: Signed = None


class Unresolved(_Frozen):
    """An effect step whose outcome nobody can tell; the run waits for an operator."""

    step_id: str
    tool: str
    effect_key: str | None
    reason: str


class Resolution(_Sent):
    """The payload of the `resolve` signal: what an operator decided about an unclear effect."""

    step_id: str
    action: Literal["result", "retry", "abort"]
    """`result`: record `result` as the step's outcome; `retry`: reconcile then run again;
    `abort`: tell the model the step was abandoned."""
    result: str = ""
    reviewer: str = "unknown"
    reason: str = ""
    identity: str = ""
    decision_id: DecisionId = ""
    signature: Signed = None


class Correction(_Sent):
    """The payload of the `correct` signal: fix a recorded tool result, or tell the model something.

    Applied before the next model step and recorded in the ledger as an operator step.
    """

    step_id: str | None = None
    """A completed tool step whose recorded result `result` replaces."""
    result: str | None = None
    note: str | None = None
    """Text for the model, added to the conversation before its next turn."""
    reviewer: str = "unknown"
    reason: str = ""
    identity: str = ""
    decision_id: DecisionId = ""
    """Made by the sender: a second arrival of the same id (an Update whose answer was lost,
    sent again as a signal) is a recorded no-op, so a note never reaches the model twice."""
    signature: Signed = None


class Steer(_Sent):
    """The payload of the `steer` signal and update: a person's message for the running agent.

    Delivered at the next safe point: a model step in flight is cancelled and asked again with
    the message; tool calls in flight finish (or reconcile) first, and it goes with their
    results. Recorded in the ledger as an operator step, with who sent it and when.
    """

    message: str
    reviewer: str = "unknown"
    identity: str = ""
    """The sending Temporal client's identity, recorded with the steer."""
    decision_id: DecisionId = ""
    """Made by the sender: a second arrival of the same id (an Update whose answer was lost,
    sent again as a signal) is a recorded no-op, so the model reads the message once."""
    signature: Signed = None


class PendingSteer(_Frozen):
    """A steer the run accepted and has not yet put in front of the model."""

    step_id: str
    """The operator step that records it."""
    text: str
    """What the model reads."""


class IgnoredSignal(_Frozen):
    """A signal the workflow could not apply, kept so an operator can see why."""

    signal: str
    step_id: str
    reason: str
