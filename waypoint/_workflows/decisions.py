"""Whether a person's decision fits the run, and who made it. Deterministic, pure checks.

Approve, reject and resolve arrive as Updates (the sender hears accepted, or rejected with the
reason) or as signals (for when no worker is up: refused ones are recorded as ignored). Both
go through these checks, so the two paths can never disagree.
"""

from __future__ import annotations

from typing import TypeVar

from pydantic import BaseModel, ValidationError
from temporalio import workflow
from temporalio.common import RawValue
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from waypoint.errors import StoredPayloadError
    from waypoint.protocol import (
        AgentSpec,
        AgentState,
        ApprovalDecision,
        Receipt,
        Resolution,
        StepRecord,
        plaintext,
    )

T = TypeVar("T", bound=BaseModel)


def who(reviewer: str, identity: str, signed: bool = False) -> str:
    """`alice (12345@host)`: the reviewer named, and the Temporal client that sent it.

    Both are what the sender says; `alice (signed; 12345@host)` when the run checked alice's
    signature.
    """
    said = "; ".join(p for p in ("signed" if signed else "", identity) if p)
    return f"{reviewer} ({said})" if said else reviewer


def seen(s: AgentState, decision_id: str) -> bool:
    """Whether a decision with this id was applied already (a repeat is a no-op)."""
    return bool(decision_id) and decision_id in s.decision_ids


def _record(s: AgentState, step_id: str) -> StepRecord | None:
    return next((r for r in reversed(s.ledger) if r.step_id == step_id), None)


def _already(s: AgentState, step_id: str) -> str:
    record = _record(s, step_id)
    if record is not None and record.decided_by:
        return f"{step_id} was already decided by {record.decided_by} at {record.decided_at}"
    return ""


def approval_refusal(s: AgentState, decision: ApprovalDecision) -> str:
    """Why this approve/reject cannot apply, or '' when it can (a repeat is a recorded no-op)."""
    step_id = decision.step_id
    if seen(s, decision.decision_id):
        return ""
    pending = s.pending.get(step_id)
    if step_id in s.decisions or pending is None:
        waiting = ", ".join(p for p in s.pending if p not in s.decisions) or "none"
        return _already(s, step_id) or f"no approval is pending for {step_id} (pending: {waiting})"
    if decision.arguments_hash is None:
        if s.spec is not None and s.spec.approval_hash == "required":
            return (
                "arguments_hash is required: approve what you reviewed. Read it with "
                "`waypoint status RUN` or the `pending_approvals` query"
            )
    elif decision.arguments_hash != pending.arguments_hash:
        return "stale approval: the arguments have changed since they were reviewed"
    return ""


def resolution_refusal(s: AgentState, resolution: Resolution) -> str:
    """Why this resolve cannot apply, or '' when it can (a repeat is a recorded no-op)."""
    step_id = resolution.step_id
    if seen(s, resolution.decision_id) or (
        step_id in s.unresolved and step_id not in s.resolutions
    ):
        return ""
    waiting = ", ".join(s.unresolved) or "none"
    return _already(s, step_id) or f"nothing to resolve for {step_id} (waiting: {waiting})"


def stamp(s: AgentState, step_id: str, decided_by: str) -> str:
    """Record who decided a step, and when, in its ledger line; returns the time."""
    at = workflow.now().isoformat()
    record = _record(s, step_id)
    if record is not None:
        record.decided_by = decided_by
        record.decided_at = at
    return at


def receipt(s: AgentState, step_id: str, decision: str, refused: str = "") -> Receipt:
    """What an update answers once its decision is recorded, or why it was refused after all."""
    if refused:
        return Receipt(step_id=step_id, decision="refused", refused=refused)
    record = _record(s, step_id)
    return Receipt(
        step_id=step_id,
        decision=decision,
        decided_by=(record.decided_by if record else "") or "",
        decided_at=(record.decided_at if record else "") or "",
    )


def refuse(why: str) -> None:
    """Reject an update in its validator: the sender hears why, and history stays clean."""
    if why:
        raise ApplicationError(why, type="DecisionRefused", non_retryable=True)


def decode(
    signal: str, raw: RawValue, kind: type[T], spec: AgentSpec | None = None
) -> tuple[T | None, str]:
    """A signal's payload as `kind`, or why it cannot be one.

    Only the shape of what was wrong is said, never the values sent. A run whose `spec` refuses
    plain text refuses a payload that arrived unencrypted (`waypoint._security.plaintext`); so does
    one whose spec has not loaded yet, which cannot know (only an encrypting worker marks one).
    """
    if plaintext.marked(raw.payload) and (spec is None or spec.refuse_plaintext):
        return None, f"{signal}: {plaintext.REFUSED}"
    try:
        value = workflow.payload_converter().from_payload(raw.payload, kind)
    except ValidationError as err:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or '(payload)'}: {e['type']}"
            for e in err.errors()
        )
        return None, f"malformed {signal} payload ({problems}); expected {kind.__name__}"
    except StoredPayloadError as err:  # our own words: a refused reference or ciphertext
        return None, f"undecodable {signal} payload: {err}"
    except Exception as err:  # noqa: BLE001 - any undecodable payload is refused the same way
        return (
            None,
            f"undecodable {signal} payload ({type(err).__name__}); expected {kind.__name__}",
        )
    # Some encodings ignore the type hint (binary/protobuf decodes to its own message type).
    if not isinstance(value, kind):
        return None, f"{signal} payload is a {type(value).__name__}; expected {kind.__name__}"
    return value, ""
