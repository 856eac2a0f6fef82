"""What a person sends a run: approve, reject, resolve, answer, correct, steer, set its policy.

Each goes as an Update when a worker answers (the sender gets a receipt, or the refusal and its
reason), else as a signal the run applies when a worker picks it up. A decision is first
checked against what the run waits for (the worker's answer, or the run's memo when no worker
answers), so a typo is refused here, not recorded as an ignored signal. Whether an answer fits
its tool's output schema, or a policy change applies, the run itself decides.

Each decision carries an id made here (also the Update's id): an Update that was applied but
whose answer was lost goes again as a signal with the same id, and the run counts it once.
With a `signing_key` the decision is signed for the reviewer (`waypoint.security.signing`).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel
from temporalio.client import (
    Client,
    WorkflowQueryFailedError,
    WorkflowUpdateFailedError,
    WorkflowUpdateHandle,
    WorkflowUpdateRPCTimeoutOrCancelledError,
    WorkflowUpdateStage,
)
from temporalio.service import RPCError

from waypoint.client import views
from waypoint.errors import (
    DecisionRefusedError,
    RunClosedError,
    RunStuckError,
    StepNotPendingError,
)
from waypoint.protocol import (
    ApprovalDecision,
    ClientAnswer,
    Correction,
    DecisionReceipt,
    PendingApproval,
    Resolution,
    Steer,
)
from waypoint.protocol.policy import ApprovalPolicy, PolicyChange, PolicyView

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

QUERY_TIMEOUT = 15.0
"""Seconds a library caller waits for a worker's answer: a margin for a loaded machine and a
worker replaying a long history. The CLI waits less and answers from the memo instead."""
UPDATE_TIMEOUT = 10.0


@dataclass
class Sent:
    """What became of a decision: a receipt from the run, or a signal a worker will pick up."""

    step_id: str
    receipt: DecisionReceipt | None
    """None when no worker answered: the decision went as a signal, applied on pickup."""
    as_of: str = ""
    """When the memo the decision was checked against was written (signal path only)."""
    pending: PendingApproval | None = None


async def decide(
    client: Client,
    run: str,
    step_id: str,
    *,
    approve: bool,
    reviewer: str,
    reason: str = "",
    timeout: float = QUERY_TIMEOUT,
    remember: Literal["", "tool", "args"] = "",
    decision_id: str = "",
    signing_key: Ed25519PrivateKey | None = None,
    arguments_hash: str = "",
) -> Sent:
    """Approve or reject a pending tool call, checked against what the run waits for.

    `remember` (approvals only): allow later calls of the tool (`tool`), or with exactly these
    arguments (`args`), for the rest of the run, with no one asked. `decision_id`: the
    decision's id (made here when empty); sending one id again is a recorded no-op.
    `signing_key`: the reviewer's key, for agents that accept signed decisions only.
    `arguments_hash`: the hash of the arguments the reviewer saw (a page loaded earlier); the
    decision is refused unless the call waiting now has exactly those arguments.

    With a worker up this is an Update: the run answers with a receipt or refuses with its
    reason. With none answering within `timeout`, the decision is checked against the run's
    memo and sent as a signal, which takes effect when a worker picks the run up.

    Raises:
        RunClosedError: The run has ended.
        StepNotPendingError: The step is not awaiting approval.
        DecisionRefusedError: The run refused the decision (e.g. it was already decided), or
            the arguments waiting are not those `arguments_hash` names.
    """
    seen = await _open_view(client, run, timeout, "approve or reject")
    waiting = seen.live.pending_approvals if seen.live else seen.memo.pending_approvals  # type: ignore[union-attr]
    pending = {p.step_id: p for p in waiting}
    if step_id not in pending:
        raise StepNotPendingError(
            f"step {step_id!r} of run {run!r} is not awaiting approval "
            f"(pending: {', '.join(pending) or 'none'})"
        )
    approval = pending[step_id]
    if arguments_hash and arguments_hash != approval.arguments_hash:
        raise DecisionRefusedError(
            f"step {step_id!r} of run {run!r} now waits with other arguments than those "
            "reviewed: look at them again before deciding"
        )
    decision = ApprovalDecision(
        step_id=step_id,
        reviewer=reviewer,
        reason=reason,
        arguments_hash=arguments_hash or approval.arguments_hash,
        identity=client.identity,
        remember=remember if approve else "",
        decision_id=decision_id or new_decision_id(),
    )
    name = "approve" if approve else "reject"
    sent = await _deliver(client, seen, name, decision, timeout, signing_key)
    sent.pending = approval
    return sent


async def resolve(
    client: Client,
    run: str,
    resolution: Resolution,
    timeout: float = QUERY_TIMEOUT,
    signing_key: Ed25519PrivateKey | None = None,
) -> Sent:
    """Tell a parked run what happened to an effect it could not confirm (checked first).

    Like `decide`: an Update when a worker answers, else a signal checked against the memo.
    """
    seen = await _open_view(client, run, timeout, "resolve")
    unresolved = seen.live.unresolved if seen.live else seen.memo.unresolved  # type: ignore[union-attr]
    waiting = {u.step_id for u in unresolved}
    if resolution.step_id not in waiting:
        raise StepNotPendingError(
            f"step {resolution.step_id!r} of run {run!r} does not need reconciliation "
            f"(waiting: {', '.join(sorted(waiting)) or 'none'})"
        )
    resolution = resolution.model_copy(
        update={
            "identity": client.identity,
            "decision_id": resolution.decision_id or new_decision_id(),
        }
    )
    return await _deliver(client, seen, "resolve", resolution, timeout, signing_key)


async def _open_view(client: Client, run: str, timeout: float, what: str) -> views.RunView:
    """The run's view, refusing a closed run or one that has not started its loop yet."""
    seen = await views.view(client, run, timeout)
    if seen.closed:
        raise RunClosedError(f"run {run!r} is {seen.execution}: nothing to {what}")
    if seen.live is None and seen.memo is None:
        raise RunStuckError(
            f"no worker answered for run {run!r} within {timeout:g}s and it has not recorded "
            "what it waits for yet: start `waypoint worker` on its task queue"
        )
    return seen


def new_decision_id() -> str:
    """A fresh decision id: the run applies a decision of one id once."""
    return uuid.uuid4().hex


async def chain_id(client: Client, run: str) -> str:
    """The first execution run id of the run's chain: what a signed decision is bound to.

    It stays the same across continue-as-new and is new for a rerun of the workflow id.
    """
    described = await client.get_workflow_handle(run).describe()
    info = described.raw_description.workflow_execution_info
    return info.first_run_id or described.run_id


async def _deliver(
    client: Client,
    seen: views.RunView,
    name: str,
    payload: BaseModel,
    timeout: float,
    signing_key: Ed25519PrivateKey | None = None,
) -> Sent:
    """Send a decision as an Update when a worker answered, else (or if it stops) as a signal.

    The Update's id is the decision's: the signal that follows a lost answer carries the same
    id, so the run applies the decision once whichever arrives.
    """
    step_id = str(getattr(payload, "step_id", ""))
    if signing_key is not None:
        from waypoint.security.signing import sign  # cryptography: loaded only to sign

        chain = await chain_id(client, seen.run)
        payload = sign(signing_key, seen.run, chain, name, payload)
    run = client.get_workflow_handle(seen.run)
    update: WorkflowUpdateHandle[DecisionReceipt] | None = None
    if seen.live is not None:
        wait = timedelta(seconds=max(timeout, UPDATE_TIMEOUT))
        try:
            update = await run.start_update(
                name,
                payload,
                wait_for_stage=WorkflowUpdateStage.ACCEPTED,
                id=str(getattr(payload, "decision_id", "")) or None,
                result_type=DecisionReceipt,
                rpc_timeout=wait,
            )
            receipt = await update.result(rpc_timeout=wait)
        except WorkflowUpdateFailedError as err:
            raise DecisionRefusedError(_refusal(err)) from err
        except WorkflowUpdateRPCTimeoutOrCancelledError:
            if update is not None:  # accepted: it applies, but its answer is not in yet
                return Sent(step_id, _still_checking(name, payload))
            # the worker went away: the signal below is checked again when one returns
        else:
            if receipt.refused:
                raise DecisionRefusedError(receipt.refused)
            return Sent(step_id, receipt)
    await run.signal(name, payload)
    return Sent(step_id, None, as_of=seen.memo.updated_at if seen.memo else "")


def _still_checking(name: str, payload: BaseModel) -> DecisionReceipt:
    """The receipt of an update the run accepted and has not answered yet.

    An approved call's reads may be being read again before it runs: recorded, its outcome
    still to come.
    """
    return DecisionReceipt(
        step_id=str(getattr(payload, "step_id", "")),
        decision=name,
        decided_by=str(getattr(payload, "reviewer", "")),
        decided_at="",
        detail="accepted; the run is still checking the call before it runs: "
        "`waypoint status` or the run's events say whether it ran",
    )


async def answer(
    client: Client,
    run: str,
    step_id: str,
    result: dict[str, Any],
    *,
    sender: str = "unknown",
    timeout: float = QUERY_TIMEOUT,
) -> Sent:
    """Give a pending client tool call its result.

    Raises:
        RunClosedError: The run has ended.
        StepNotPendingError: The step is not waiting for an answer.
        DecisionRefusedError: The run refused the answer (e.g. it does not fit the output type).
    """
    seen = await _open_view(client, run, timeout, "answer")
    waiting = seen.live.pending_questions if seen.live else seen.memo.pending_questions  # type: ignore[union-attr]
    if step_id not in {q.step_id for q in waiting}:
        raise StepNotPendingError(
            f"step {step_id!r} of run {run!r} is not waiting for an answer "
            f"(waiting: {', '.join(q.step_id for q in waiting) or 'none'})"
        )
    given = ClientAnswer(
        step_id=step_id,
        result=result,
        sender=sender,
        identity=client.identity,
        decision_id=new_decision_id(),
    )
    return await _deliver(client, seen, "answer", given, timeout)


async def correct(
    client: Client, run: str, correction: Correction, timeout: float = QUERY_TIMEOUT
) -> Sent:
    """Replace a finished tool step's recorded result and/or leave a note for the model.

    Like `decide`: an Update when a worker answers (a step that is not finished, or whose
    turn is still running, is refused with the reason), else a signal the run checks itself.

    Raises:
        RunClosedError: The run has ended.
        DecisionRefusedError: The run refused the correction.
    """
    seen = await _open_view(client, run, timeout, "correct")
    correction = correction.model_copy(
        update={
            "identity": client.identity,
            "decision_id": correction.decision_id or new_decision_id(),
        }
    )
    return await _deliver(client, seen, "correct", correction, timeout)


async def steer(
    client: Client,
    run: str,
    message: str,
    *,
    reviewer: str,
    timeout: float = QUERY_TIMEOUT,
    decision_id: str = "",
) -> Sent:
    """Give a running agent a message now, delivered at the next safe point.

    A model step in flight is cancelled (what it spent is recorded) and asked again with the
    message; tool calls in flight finish first and the message goes with their results. Like
    `decide`: an Update when a worker answers, whose receipt names the operator step that
    records the steer and says where the message goes (`receipt.detail`); else a signal the
    run applies when a worker picks it up. The run refuses an empty message, or one sent as it
    ends; an Update's sender hears why, a signal's refusal is listed under `ignored_signals`.

    Raises:
        RunClosedError: The run has ended.
        DecisionRefusedError: The run refused the steer.
    """
    seen = await _open_view(client, run, timeout, "steer")
    given = Steer(
        message=message,
        reviewer=reviewer,
        identity=client.identity,
        decision_id=decision_id or new_decision_id(),
    )
    return await _deliver(client, seen, "steer", given, timeout)


async def set_policy(
    client: Client,
    run: str,
    policy: ApprovalPolicy,
    *,
    reviewer: str,
    reason: str = "",
    timeout: float = QUERY_TIMEOUT,
    decision_id: str = "",
    signing_key: Ed25519PrivateKey | None = None,
) -> Sent:
    """Put `policy` in force on a live run for the rest of it; the ledger records who did.

    `decision_id` and `signing_key` as for `decide`.

    Raises:
        RunClosedError: The run has ended.
        DecisionRefusedError: The run refused the change.
    """
    seen = await _open_view(client, run, timeout, "change the policy of")
    change = PolicyChange(
        policy=policy,
        reviewer=reviewer,
        reason=reason,
        identity=client.identity,
        decision_id=decision_id or new_decision_id(),
    )
    return await _deliver(client, seen, "set_policy", change, timeout, signing_key)


async def show_policy(client: Client, run: str, timeout: float = QUERY_TIMEOUT) -> PolicyView:
    """The policy in force on a run, where it came from, and the approvals remembered.

    Raises:
        RunStuckError: No worker answered (the policy lives in the run's state).
    """
    handle = client.get_workflow_handle(run)
    try:
        return await handle.query(
            "policy", result_type=PolicyView, rpc_timeout=timedelta(seconds=timeout)
        )
    except (RPCError, WorkflowQueryFailedError) as err:
        raise RunStuckError(
            f"no worker answered for run {run!r} within {timeout:g}s ({err}): start "
            "`waypoint worker` on its task queue to read its policy"
        ) from err


def _refusal(err: WorkflowUpdateFailedError) -> str:
    """The run's reason, with its causes: "Failed decoding arguments" alone does not say why."""
    reasons, cause = [], err.cause
    while cause is not None:
        reasons.append(getattr(cause, "message", "") or str(cause))
        cause = cause.__cause__
    return ": ".join(r for r in reasons if r) or str(err)
