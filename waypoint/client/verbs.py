"""How a verb reaches a run, and the verbs that act on the run as a whole: pause, cancel, resume.

A verb is checked against the run first (a closed run, a step it does not wait for), then sent
as an Update when a worker answers (the sender gets the run's receipt, or the refusal and its
reason), else as a signal the run applies when a worker picks it up. Each carries an id made
here (also the Update's id): an Update applied but whose answer was lost goes again as a
signal with the same id, and the run counts it once. With a `signing_key` the payload is signed
for the reviewer (`waypoint._security.signing`). Every verb answers with one `Receipt`.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import TYPE_CHECKING, TypedDict, TypeVar, Unpack

from pydantic import BaseModel
from temporalio.client import (
    Client,
    WorkflowUpdateFailedError,
    WorkflowUpdateHandle,
    WorkflowUpdateRPCTimeoutOrCancelledError,
    WorkflowUpdateStage,
)

from waypoint.client import views
from waypoint.errors import DecisionRefusedError, RunClosedError, RunStuckError, WaypointError
from waypoint.protocol import Limits, ResumeRequest
from waypoint.protocol.states import RESUMABLE_STATES
from waypoint.protocol.verbs import (
    RAISE_LIMITS,
    RESUME,
    VERBS,
    Cancel,
    Hold,
    LimitsChange,
    Receipt,
)

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

P = TypeVar("P", bound=BaseModel)
QUERY_TIMEOUT = 15.0
"""Seconds a library caller waits for a worker's answer: a margin for a loaded machine and a
worker replaying a long history. The CLI waits less and answers from the memo instead."""
UPDATE_TIMEOUT = 10.0

WHAT_RESUMES = {
    "model_unavailable": "its model step is retried",
    "request_invalid": "its model step is sent again (it fails again unless its cause was fixed)",
    "output_invalid": "the model gets more tries at its final answer",
    "tool_changed": "its step runs again (it parks again unless the tool is as the run began)",
}


class Raised(TypedDict, total=False):
    """The limits `raise_limits` puts higher, by name; one not given (or None) stays as it is."""

    max_turns: int | None
    max_cost_usd: float | None
    max_total_tokens: int | None


REPLANS = "the model is told its tool changed; the run takes the new build's tools, nothing else"


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


async def signed(
    client: Client, run: str, name: str, payload: P, key: Ed25519PrivateKey | None
) -> P:
    """`payload` signed as verb `name` for `run` with the reviewer's key; as is without one."""
    if key is None:
        return payload
    from waypoint._security.signing import sign  # cryptography: loaded only to sign

    return sign(key, run, await chain_id(client, run), name, payload)


async def open_view(
    client: Client, run: str, timeout: float, what: str, *, ask_worker: bool = True
) -> views.RunView:
    """The run's view, refusing a closed run or one that has not started its loop yet."""
    seen = await views.view(client, run, timeout, ask_worker=ask_worker)
    if seen.closed:
        raise RunClosedError(f"run {run!r} is {seen.execution}: nothing to {what}")
    if ask_worker and seen.live is None and seen.memo is None:
        raise RunStuckError(
            f"no worker answered for run {run!r} within {timeout:g}s and it has not recorded "
            "what it waits for yet: start `waypoint worker` on its task queue"
        )
    return seen


async def deliver(
    client: Client,
    seen: views.RunView,
    name: str,
    payload: BaseModel,
    timeout: float,
    signing_key: Ed25519PrivateKey | None = None,
) -> Receipt:
    """Send a verb as an Update when a worker answered, else (or if it stops) as a signal.

    The Update's id is the decision's: the signal that follows a lost answer carries the same
    id, so the run applies the decision once whichever arrives.
    """
    step_id = str(getattr(payload, "step_id", "") or "")
    payload = await signed(client, seen.run, name, payload, signing_key)
    run = client.get_workflow_handle(seen.run)
    update: WorkflowUpdateHandle[Receipt] | None = None
    if seen.live is not None and VERBS[name].update:
        wait = timedelta(seconds=max(timeout, UPDATE_TIMEOUT))
        try:
            update = await run.start_update(
                name,
                payload,
                wait_for_stage=WorkflowUpdateStage.ACCEPTED,
                id=str(getattr(payload, "decision_id", "")) or None,
                result_type=Receipt,
                rpc_timeout=wait,
            )
            receipt = await update.result(rpc_timeout=wait)
        except WorkflowUpdateFailedError as err:
            raise DecisionRefusedError(_refusal(err)) from err
        except WorkflowUpdateRPCTimeoutOrCancelledError:
            if update is not None:  # accepted: it applies, but its answer is not in yet
                return _still_checking(seen.run, name, step_id, payload)
            # the worker went away: the signal below is checked again when one returns
        else:
            if receipt.refused:
                raise DecisionRefusedError(receipt.refused)
            return receipt.model_copy(update={"run": seen.run})
    await run.signal(name, payload)
    as_of = seen.memo.updated_at if seen.memo else ""
    return Receipt(
        run=seen.run, step_id=step_id, decision=VERBS[name].done, recorded=False, as_of=as_of
    )


def _still_checking(run: str, name: str, step_id: str, payload: BaseModel) -> Receipt:
    """The receipt of an update the run accepted and has not answered yet.

    An approved call's reads may be being read again before it runs: recorded, its outcome
    still to come.
    """
    return Receipt(
        run=run,
        step_id=step_id,
        decision=VERBS[name].done,
        decided_by=str(getattr(payload, "reviewer", "")),
        detail="accepted; the run is still checking the call before it runs: "
        "`waypoint status` or the run's events say whether it ran",
    )


def _refusal(err: WorkflowUpdateFailedError) -> str:
    """The run's reason, with its causes: "Failed decoding arguments" alone does not say why."""
    reasons, cause = [], err.cause
    while cause is not None:
        reasons.append(getattr(cause, "message", "") or str(cause))
        cause = cause.__cause__
    return ": ".join(r for r in reasons if r) or str(err)


async def send(
    client: Client,
    run: str,
    name: str,
    payload: BaseModel,
    timeout: float,
    signing_key: Ed25519PrivateKey | None = None,
) -> Receipt:
    """Send `payload` as the verb `name`, with this client's identity and a decision id."""
    seen = await open_view(client, run, timeout, name)
    return await deliver(client, seen, name, stamped(client, payload), timeout, signing_key)


def stamped(client: Client, payload: P) -> P:
    """`payload` with this client's identity, and a decision id made here when it has none."""
    made = getattr(payload, "decision_id", "") or new_decision_id()
    return payload.model_copy(update={"identity": client.identity, "decision_id": made})


def _simple(name: str):  # noqa: ANN202 - the function made, as typed below
    """The client function of a `Verb.simple` verb sent to the run (pause, unpause)."""

    async def verb(
        client: Client,
        run: str,
        *,
        reviewer: str,
        reason: str = "",
        timeout: float = QUERY_TIMEOUT,
        decision_id: str = "",
        signing_key: Ed25519PrivateKey | None = None,
    ) -> Receipt:
        hold = Hold(reviewer=reviewer, reason=reason, decision_id=decision_id)
        return await send(client, run, name, hold, timeout, signing_key)

    verb.__name__ = verb.__qualname__ = name
    verb.__doc__ = f"""{VERBS[name].does[0].upper()}{VERBS[name].does[1:]}.

    Raises:
        RunClosedError: The run has ended.
        DecisionRefusedError: The run refused it (its reason says why: paused already, ...).
    """
    return verb


SIMPLE = {n: _simple(n) for n, v in VERBS.items() if v.simple and v.handler}
"""The client function of every simple verb the run applies, by name: `verbs.pause`, ..."""


def __getattr__(name: str) -> Callable[..., Awaitable[Receipt]]:
    """`verbs.pause`, `verbs.unpause`: a simple verb's function, made from its `VERBS` entry."""
    if name in SIMPLE:
        return SIMPLE[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


async def _signed_here(
    client: Client, seen: views.RunView, name: str, payload: P, key: Ed25519PrivateKey | None
) -> P:
    """`payload` signed for the run, or refused unsigned when its agent takes signed ones only.

    For a verb the run cannot check itself (Temporal's cancel; a fork, checked by the new run).
    """
    if key is not None:
        return await signed(client, seen.run, name, payload, key)
    if seen.memo is not None and seen.memo.signed:
        raise DecisionRefusedError(
            f"unsigned {name}: the agent of run {seen.run!r} accepts signed decisions only; "
            "sign with the reviewer's key (WAYPOINT_DECISION_KEY, or signing_key=)"
        )
    return payload


async def cancel(
    client: Client,
    run: str,
    *,
    reason: str = "",
    reviewer: str,
    timeout: float = QUERY_TIMEOUT,
    signing_key: Ed25519PrivateKey | None = None,
) -> Receipt:
    """Cancel the run: steps in flight stop (effects report first); it ends `cancelled`.

    Who asked and why go into the run's history as the cancel's reason, with the reviewer's
    signature when signed (`Cancel.cancel_reason`): Temporal's cancel is not a message the run
    can refuse, so the client refuses an unsigned cancel of a `signed_decisions` agent itself.

    Raises:
        RunClosedError: The run has ended.
        DecisionRefusedError: Unsigned, and the run's agent takes signed decisions only.
    """
    seen = await open_view(client, run, timeout, "cancel", ask_worker=False)
    asked = Cancel(reviewer=reviewer, reason=reason)
    why = (await _signed_here(client, seen, "cancel", asked, signing_key)).cancel_reason()
    await client.get_workflow_handle(run).cancel(reason=why)
    return Receipt(run=run, decision=VERBS["cancel"].done, decided_by=reviewer, detail=why)


async def resume(
    client: Client,
    run: str,
    *,
    reviewer: str,
    reason: str = "",
    replan: bool = False,
    timeout: float = views.QUICK,
    signing_key: Ed25519PrivateKey | None = None,
    **raised: Unpack[Raised],
) -> Receipt:
    """Continue a parked run: retry its parked step, or raise the limit it stopped at.

    A run in one of `RESUMABLE_STATES` gets the `resume` signal; any other gets `raise_limits`
    with the limits named (`raise_limits`).

    Raises:
        RunClosedError: The run has ended.
        WaypointError: `replan` for a run not in `tool_changed`, or no higher limit given.
    """
    _given(raised)  # a misspelt limit is refused whatever the run's state
    view = await open_view(client, run, timeout, "resume", ask_worker=False)
    if replan and view.state != "tool_changed":
        raise WaypointError(
            f"run {run!r} is {view.state}: replan is for a run parked in tool_changed"
        )
    if view.state not in RESUMABLE_STATES:
        return await raise_limits(
            client, run, reviewer=reviewer, timeout=timeout, signing_key=signing_key, **raised
        )
    request = ResumeRequest(reviewer=reviewer, reason=reason, replan=replan)
    await deliver(client, view, RESUME, stamped(client, request), timeout, signing_key)
    what = REPLANS if replan else WHAT_RESUMES.get(view.state, "it goes on")
    detail = view.memo.detail if view.memo else ""
    return Receipt(
        run=run, decision=VERBS[RESUME].done, decided_by=reviewer, state=view.state,
        detail=f"{what} ({detail})" if detail else what, recorded=False,
    )  # fmt: skip


async def raise_limits(
    client: Client,
    run: str,
    *,
    reviewer: str,
    timeout: float = views.QUICK,
    signing_key: Ed25519PrivateKey | None = None,
    **raised: Unpack[Raised],
) -> Receipt:
    """Put higher limits in force, keeping the others; a run parked at a limit goes on.

    Raises:
        RunClosedError: The run has ended.
        RunStuckError: No worker answered (the limits in force are the run's to say).
        WaypointError: No limit given, or one not higher than the run's (or it has none).
    """
    view = await open_view(client, run, timeout, "raise the limits of", ask_worker=False)
    changes = _given(raised)
    if not changes:
        raise WaypointError(
            f"run {run!r} is {view.state}: give a new limit (max turns, max cost in USD, "
            "max total tokens) to raise"
        )
    handle = client.get_workflow_handle(run)
    if await views.live_status(client, run, timeout) is None:
        raise RunStuckError(
            f"no worker answered for run {run!r} within {timeout:g}s: is `waypoint worker` "
            "running on the run's task queue?"
        )
    limits = await handle.query("limits", result_type=Limits)
    lower = [
        f"{name}={value} (now {getattr(limits, name)})"
        for name, value in changes.items()
        if getattr(limits, name) is None or value <= getattr(limits, name)
    ]
    if lower:
        raise WaypointError(
            f"run {run!r}: {', '.join(lower)} would not raise the limit; give a higher one"
        )
    higher = limits.model_copy(update=changes)
    change = LimitsChange(**higher.model_dump(), reviewer=reviewer)
    await deliver(client, view, RAISE_LIMITS, stamped(client, change), timeout, signing_key)
    shown = ", ".join(f"{name}={value}" for name, value in changes.items())
    return Receipt(
        run=run, decision=VERBS[RAISE_LIMITS].done, decided_by=reviewer, state=view.state,
        detail=shown, limits=higher, recorded=False,
    )  # fmt: skip


def _given(raised: Raised) -> dict[str, int | float]:
    """The limits given, in `Raised`'s order; one it does not name is refused, as Python would."""
    if unknown := raised.keys() - Raised.__annotations__.keys():
        raise TypeError(f"unexpected keyword arguments: {', '.join(sorted(unknown))}")
    return {k: v for k in Raised.__annotations__ if (v := raised.get(k)) is not None}
