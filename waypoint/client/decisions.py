"""What a person decides for a run: approve, reject, resolve, answer, correct, steer, its policy.

Each is checked against what the run waits for first (the worker's answer, or the run's memo
when no worker answers), so a typo is refused here, not recorded as an ignored signal; then it
goes as `waypoint.client.verbs.deliver` sends every verb. Whether an answer fits its tool's
output schema, or a policy change applies, the run itself decides. Every verb takes the run,
what it is about, then `reviewer`, `reason`, `timeout`, `decision_id` and `signing_key` by
name, and answers with a `Receipt`.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal

from temporalio.client import Client, WorkflowQueryFailedError
from temporalio.service import RPCError

from waypoint.client import views
from waypoint.client.verbs import QUERY_TIMEOUT, deliver, open_view, send, stamped
from waypoint.errors import (
    DecisionRefusedError,
    RunStuckError,
    StepNotPendingError,
    WaypointError,
)
from waypoint.protocol import (
    ApprovalDecision,
    ClientAnswer,
    Correction,
    Resolution,
    Steer,
)
from waypoint.protocol.policy import ApprovalPolicy, PolicyChange, PolicyView
from waypoint.protocol.verbs import (
    ANSWER,
    APPROVE,
    CORRECT,
    REJECT,
    RESOLVE,
    SET_POLICY,
    STEER,
    Receipt,
)

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey


def _decision(name: str, doc: str):  # noqa: ANN202 - the function made, as typed below
    """The client function of `approve` or `reject`: one decision, two verdicts."""

    async def decide(
        client: Client,
        run: str,
        step_id: str,
        *,
        reviewer: str,
        reason: str = "",
        remember: Literal["", "tool", "args"] = "",
        arguments_hash: str = "",
        timeout: float = QUERY_TIMEOUT,
        decision_id: str = "",
        signing_key: Ed25519PrivateKey | None = None,
    ) -> Receipt:
        if remember and name == REJECT:
            raise WaypointError("remember is for an approval: a rejection allows nothing later")
        decision = ApprovalDecision(
            step_id=step_id, reviewer=reviewer, reason=reason, remember=remember,
            arguments_hash=arguments_hash or None, decision_id=decision_id,
        )  # fmt: skip
        return await _decide(client, run, name, decision, timeout, signing_key)

    decide.__name__, decide.__qualname__, decide.__doc__ = name, name, doc
    return decide


approve = _decision(
    APPROVE,
    """Approve a pending tool call, checked against what the run waits for.

    `remember`: allow later calls of the tool (`tool`), or with exactly these arguments
    (`args`), for the rest of the run, with no one asked. `arguments_hash`: the hash of the
    arguments the reviewer saw (a page loaded earlier); refused unless the call waiting now
    has exactly those arguments. `decision_id`: made here when empty; sending one id again is a
    recorded no-op. `signing_key`: the reviewer's key, for agents that accept signed decisions
    only. The receipt's `pending` is the call as the run waited with it.

    Raises:
        RunClosedError: The run has ended.
        StepNotPendingError: The step is not awaiting approval.
        DecisionRefusedError: The run refused the decision (e.g. it was already decided), or
            the arguments waiting are not those `arguments_hash` names.
    """,
)
reject = _decision(
    REJECT, "Reject a pending tool call; the model is told who rejected it and why (as `approve`)."
)


async def _decide(
    client: Client,
    run: str,
    verb: str,
    decision: ApprovalDecision,
    timeout: float,
    signing_key: Ed25519PrivateKey | None,
) -> Receipt:
    """With a worker up an Update (a receipt, or the refusal); else a signal checked first.

    The decision's `arguments_hash`, when set, must be the waiting call's; unset, it becomes it.
    """
    seen = await open_view(client, run, timeout, "approve or reject")
    step_id, reviewed = decision.step_id, decision.arguments_hash
    approval = _waiting(seen, "pending_approvals", step_id, "is not awaiting approval", "pending")
    if reviewed and reviewed != approval.arguments_hash:
        raise DecisionRefusedError(
            f"step {step_id!r} of run {run!r} now waits with other arguments than those "
            "reviewed: look at them again before deciding"
        )
    given = decision.model_copy(update={"arguments_hash": approval.arguments_hash})
    sent = await deliver(client, seen, verb, stamped(client, given), timeout, signing_key)
    return sent.model_copy(update={"pending": approval})


def _waiting(seen: views.RunView, listed: str, step_id: str, not_so: str, label: str) -> Any:
    """What the run waits for at `step_id` among its `listed` (the worker's, else the memo's).

    Refused here when it waits for no such thing, so a typo is not recorded as an ignored signal.
    """
    waiting = {w.step_id: w for w in getattr(seen.live or seen.memo, listed)}
    if step_id not in waiting:
        raise StepNotPendingError(
            f"step {step_id!r} of run {seen.run!r} {not_so} "
            f"({label}: {', '.join(waiting) or 'none'})"
        )
    return waiting[step_id]


async def resolve(
    client: Client,
    run: str,
    resolution: Resolution,
    timeout: float = QUERY_TIMEOUT,
    signing_key: Ed25519PrivateKey | None = None,
    *,
    reviewer: str = "",
) -> Receipt:
    """Tell a parked run what happened to an effect it could not confirm (checked first).

    Like `approve`: an Update when a worker answers, else a signal checked against the memo.
    `reviewer`, when given, is who resolves (over the resolution's own).
    """
    seen = await open_view(client, run, timeout, "resolve")
    _waiting(seen, "unresolved", resolution.step_id, "does not need reconciliation", "waiting")
    by = resolution.model_copy(update={"reviewer": reviewer or resolution.reviewer})
    return await deliver(client, seen, RESOLVE, stamped(client, by), timeout, signing_key)


async def answer(
    client: Client,
    run: str,
    step_id: str,
    result: dict[str, Any],
    *,
    reviewer: str = "unknown",
    timeout: float = QUERY_TIMEOUT,
    decision_id: str = "",
    signing_key: Ed25519PrivateKey | None = None,
) -> Receipt:
    """Give a pending client tool call its result; `reviewer` is who answers.

    Raises:
        RunClosedError: The run has ended.
        StepNotPendingError: The step is not waiting for an answer.
        DecisionRefusedError: The run refused the answer (e.g. it does not fit the output type).
    """
    seen = await open_view(client, run, timeout, "answer")
    _waiting(seen, "pending_questions", step_id, "is not waiting for an answer", "waiting")
    given = ClientAnswer(step_id=step_id, result=result, sender=reviewer, decision_id=decision_id)
    given = stamped(client, given)
    return await deliver(client, seen, ANSWER, given, timeout, signing_key)


async def correct(
    client: Client,
    run: str,
    correction: Correction,
    timeout: float = QUERY_TIMEOUT,
    signing_key: Ed25519PrivateKey | None = None,
) -> Receipt:
    """Replace a finished tool step's recorded result and/or leave a note for the model.

    Like `approve`: an Update when a worker answers (a step that is not finished, or whose
    turn is still running, is refused with the reason), else a signal the run checks itself.

    Raises:
        RunClosedError: The run has ended.
        DecisionRefusedError: The run refused the correction.
    """
    return await send(client, run, CORRECT, correction, timeout, signing_key)


async def steer(
    client: Client,
    run: str,
    message: str,
    *,
    reviewer: str,
    timeout: float = QUERY_TIMEOUT,
    decision_id: str = "",
    signing_key: Ed25519PrivateKey | None = None,
) -> Receipt:
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
    given = Steer(message=message, reviewer=reviewer, decision_id=decision_id)
    return await send(client, run, STEER, given, timeout, signing_key)


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
) -> Receipt:
    """Put `policy` in force on a live run for the rest of it; the ledger records who did.

    `decision_id` and `signing_key` as for `approve`.

    Raises:
        RunClosedError: The run has ended.
        DecisionRefusedError: The run refused the change.
    """
    change = PolicyChange(policy=policy, reviewer=reviewer, reason=reason, decision_id=decision_id)
    return await send(client, run, SET_POLICY, change, timeout, signing_key)


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
