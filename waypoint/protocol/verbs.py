"""Every verb people send a run, defined once: payload, role, handler, receipt, ledger line.

The workflow names its signals and updates by the handler constants here; the client has a
function of each verb's name; the CLI, the console's API and pages, the OpenAPI document, the
torture generator and `docs/verbs.md` are built from `VERBS` or held to it by a test
(`tests/test_verbs.py`). Stdlib and pydantic only: workflow code imports it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, Field

from waypoint.protocol.base import _Frozen, _Sent, _unset
from waypoint.protocol.decisions import (
    ApprovalDecision,
    ClientAnswer,
    Correction,
    PendingApproval,
    Resolution,
    ResumeRequest,
    Steer,
)
from waypoint.protocol.policy import PolicyChange
from waypoint.protocol.run import ForkSource
from waypoint.protocol.signatures import DecisionId, Signed
from waypoint.protocol.spec import Limits
from waypoint.protocol.states import FINAL_STATES, STATES

Role = Literal["viewer", "approver", "operator"]
"""Who may send a verb, per agent (the console's roles): a viewer reads, an approver also
decides calls and steers, an operator also resolves, resumes, pauses and cancels."""

APPROVE = "approve"
REJECT = "reject"
ANSWER = "answer"
RESOLVE = "resolve"
CORRECT = "correct"
STEER = "steer"
SET_POLICY = "set_policy"
RESUME = "resume"
RAISE_LIMITS = "raise_limits"
PAUSE = "pause"
UNPAUSE = "unpause"
"""Signal and update names: the workflow's handlers, and what the client sends, use these."""

OPEN = frozenset(STATES) - FINAL_STATES
"""States of a run not over."""
STEER_MAX_CHARS = 20_000
"""The longest steer a run takes (the console's forms and API say the same)."""


class Hold(_Sent):
    """The payload of a `simple` verb (pause, unpause): who sends it, and why."""

    reviewer: str = "unknown"
    reason: str = ""
    identity: str = ""
    decision_id: DecisionId = ""
    signature: Signed = None


class Cancel(_Frozen):
    """What a cancel says: who asks and why (it goes as Temporal's cancel, with this reason).

    Signed, its signature goes in the cancel's reason (`cancel_reason`): Temporal records it in
    the run's history, where anyone with the reviewer's public key can check it.
    """

    reviewer: str = "unknown"
    reason: str = ""
    signature: Signed = None

    def cancel_reason(self) -> str:
        """The reason Temporal's cancel carries: who, why, and the signature when signed."""
        why = f"cancelled by {self.reviewer}: {self.reason or 'no reason given'}"
        if self.signature is None:
            return why
        return f"{why} [signed at {self.signature.signed_at}: {self.signature.value}]"


class LimitsChange(Limits):
    """The payload of `raise_limits`: the limits to put in force, and who puts them there.

    A bare `Limits` (as sent before the reviewer fields existed) decodes as one, unsigned.
    """

    reviewer: str = Field(default="", exclude_if=_unset)
    identity: str = Field(default="", exclude_if=_unset)
    decision_id: DecisionId = ""
    signature: Signed = None

    def limits(self) -> Limits:
        """The limits alone, as the run keeps them."""
        return Limits.model_validate(self.model_dump(include=set(Limits.model_fields)))


class Receipt(_Frozen):
    """What every verb answers: recorded by the run (an Update's answer) or sent for it to apply.

    The workflow fills the decision's fields; the client adds the run, and says when the run
    did not answer (`recorded=False`: a signal, applied when a worker picks the run up).
    """

    step_id: str = ""
    """The ledger line that records it (the decided step, or the operator step it made)."""
    decision: str
    """What was done, in the past tense: approved, rejected, steered, paused, ..."""
    decided_by: str = ""
    decided_at: str = ""
    refused: str = Field(default="", exclude_if=_unset)
    """Why the run refused the decision after accepting the update (a signature that does not
    hold can only be checked by an activity, after validation); recorded as an ignored signal."""
    detail: str = Field(default="", exclude_if=_unset)
    """What happens next, where the run or client can say (a steer: the model step it cancels;
    a resume: what the run does now)."""
    runs: bool | None = Field(default=None, exclude_if=lambda v: v is None)
    """For an approval: whether the approved call then ran (True) or was refused after all
    (False: a read it relied on changed, or the policy in force now denies it; `detail` says
    why). None where nothing is run on the decision's word (a rejection, a refusal)."""
    run: str = Field(default="", exclude_if=_unset)
    """The run's workflow id (a fork's: the new run's)."""
    recorded: bool = True
    """False when no worker answered and it went as a signal, applied on pickup."""
    as_of: str = Field(default="", exclude_if=_unset)
    """When the memo a signal was checked against was written."""
    state: str = Field(default="", exclude_if=_unset)
    """The state the client found the run in (a resume says which it resumed from)."""
    pending: PendingApproval | None = Field(default=None, exclude_if=lambda v: v is None)
    """For a decided approval: the call as the run waited with it."""
    limits: Limits | None = Field(default=None, exclude_if=lambda v: v is None)
    """For raised limits: the limits now in force."""


DecisionReceipt = Receipt
"""The receipt's earlier name, kept until the first release."""


@dataclass(frozen=True)
class Verb:
    """One verb: what it sends, who may, how it reaches the run, and what it leaves behind."""

    name: str
    """Its client function, CLI command and console route (`cli` and `api` when they differ)."""
    payload: type[BaseModel]
    role: Role
    done: str
    """The receipt's `decision`: what the verb did, in the past tense."""
    ledger: str
    """Where the run records it."""
    does: str
    """One line for help texts and `docs/verbs.md`."""
    handler: str = ""
    """The signal (and update) it is sent as; '' when it is no message to the run."""
    update: bool = True
    """It is an Update too when a worker answers (the sender hears a receipt or the refusal)."""
    cli: str = ""
    api: bool = True
    """The console has `POST /api/runs/{run}/<name>` for it."""
    simple: bool = False
    """It takes the run and a reason only: its client function, workflow signal and Update and
    page button are made from this entry (every verb's CLI command and API route are); what it
    does to the run is its
    `waypoint._workflows.simple.SIMPLE` entry, its torture (draw, driver, invariant) its
    `waypoint._torture.verbs.TORTURE` entry."""
    torture: str = ""
    """The scenario event (a key of `Scenario.kinds()`) whose driver sends it."""
    button: frozenset[str] = frozenset()
    """The run states in which the run's console page shows its button (a `simple` verb's)."""
    confirm: str = ""
    """What the console page asks a person to confirm, with a reason, before it sends the verb;
    '' sends it on the button's click."""
    hook: str = ""
    """Its own code, by this name, where the table cannot say all: the CLI's
    (`waypoint._cli.verbs.OWN`: the options beyond --reason and --reviewer, and the client call)
    and the console's (`waypoint._console.api.HOOKS`: a check or a refusal around the send)."""

    @property
    def command(self) -> str:
        """The CLI command that sends it."""
        return self.cli or self.name


VERBS: dict[str, Verb] = {v.name: v for v in (
    Verb(APPROVE, ApprovalDecision, "approver", "approved", "the step's line: decided by, at",
         "approve a waiting call, its exact arguments", APPROVE,
         torture="call:approval", hook="approve"),
    Verb(REJECT, ApprovalDecision, "approver", "rejected", "the step's line: rejected, by, why",
         "reject a waiting call; the model is told why", REJECT,
         torture="decision:reject", hook="reject"),
    Verb(ANSWER, ClientAnswer, "approver", "answered", "the call's line: its result, by",
         "give a client-answered call its result", ANSWER, torture="call:client",
         hook="answer"),
    Verb(RESOLVE, Resolution, "operator", "resolved", "the effect's line: resolved by, how",
         "say what happened to an unconfirmed effect, retry it, or abandon it", RESOLVE,
         torture="fault:kill_after_commit", hook="resolve"),
    Verb(CORRECT, Correction, "operator", "corrected", "an operator line (tN.operator.K)",
         "replace a finished tool result, or leave the model a note", CORRECT, api=False,
         torture="action:correct", hook="correct"),
    Verb(STEER, Steer, "approver", "steered", "an operator line (tN.operator.K, tool steer)",
         "tell the running agent something at its next safe point", STEER,
         torture="action:steer", hook="steer"),
    Verb(SET_POLICY, PolicyChange, "operator", "policy set", "a policy line (tN.policy.K)",
         "put a new approval policy in force for the rest of the run", SET_POLICY,
         cli="policy", api=False, torture="action:policy_set", hook="policy"),
    Verb(RESUME, ResumeRequest, "operator", "resumed", "the parked step's line: retried",
         "retry a parked step (or replan), or raise the limit it stopped at", RESUME,
         update=False, torture="outage:529", hook="resume"),
    Verb(RAISE_LIMITS, LimitsChange, "operator", "limits raised", "a limits line (tN.limits.K)",
         "put higher limits in force; a run parked at one goes on", RAISE_LIMITS,
         update=False, cli="resume", api=False, torture="action:raise_limits"),
    Verb(PAUSE, Hold, "operator", "paused", "an operator line (tN.operator.K, tool pause)",
         "hold the run before its next step; waiting approvals still wait", PAUSE,
         simple=True, torture="action:pause", button=OPEN - {"paused"}),
    Verb(UNPAUSE, Hold, "operator", "unpaused", "an operator line (tN.operator.K, tool unpause)",
         "let a paused run go on where it stopped", UNPAUSE, simple=True,
         torture="action:pause", button=frozenset({"paused"})),
    Verb("cancel", Cancel, "operator", "cancel requested", "steps in flight: cancelled",
         "cancel the run: steps in flight stop, effects report first", simple=True,
         torture="action:cancel", button=OPEN,
         confirm="Cancel this run? Steps in flight stop (an effect reports what it did first); "
         "calls waiting for a decision are never run. A cancelled run cannot go on."),
    Verb("fork", ForkSource, "operator", "forked", "the new run's ledger starts at the fork",
         "start a new run from a finished turn; nothing before it runs again", api=False,
         torture="action:fork", hook="fork"),
)}  # fmt: skip
"""Every verb, in the order the docs list them."""

HANDLERS = {v.handler: v for v in VERBS.values() if v.handler}
"""By signal name: the verbs that are messages to the run."""
