"""A cancelled run ends cancelled, having recorded what its steps did and spent. Deterministic.

Temporal delivers a cancel to whatever the run awaits. A model step used to take its cancelled
activity for an outage: the run parked in `model_unavailable`, a `resume` carried it on as if
never cancelled, and the answer the API had billed meanwhile was in no ledger (torture seed
128). Now:
- a model step hears its answer even when the run is cancelled meanwhile (`settled`): the
  answer is counted, then the run ends (`honour`). A call the cancel stops reports what it had
  spent (`ModelStepCancelled`), which is counted too (`end_step`). An effect's result that
  comes with the cancel is recorded the same way;
- a step that the cancel stopped, or that failed after it, never parks the run: it is marked
  `cancelled` and the run ends;
- the run shows state `cancelled` with its final totals as it ends (memo, search attributes),
  so `describe` tells what it spent with no worker up (`shown`).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

from temporalio import workflow
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    CancelledError,
    FailureError,
    is_cancelled_exception,
)

with workflow.unsafe.imports_passed_through():
    from waypoint.protocol import AgentState, PartialSpend, StepRecord
    from waypoint.protocol.steps import MODEL_CANCELLED

from waypoint._workflows.gates import Gates

T = TypeVar("T")
R = TypeVar("R")


def _requested() -> bool:
    """The run has been cancelled."""
    return workflow.cancellation_reason() is not None


async def execute(activity: str, arg: Any, **options: Any) -> Any:
    """`workflow.execute_activity`, seen to its end by a cancelled run."""
    options["cancellation_type"] = workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED
    return await settled(workflow.start_activity(activity, arg, **options))


async def settled(handle: workflow.ActivityHandle[T]) -> T:
    """The activity's outcome, also when the run is cancelled while it runs.

    The run's cancel does not reach the activity directly: temporalio raises `CancelledError`,
    not the result, for an activity that completes in the activation that brings the cancel,
    and that answer was billed. Once everything that activation resolved has run, an activity
    still going is asked to stop (it should be `WAIT_CANCELLATION_COMPLETED`) and waited for.
    """
    try:
        return await asyncio.shield(handle)
    except asyncio.CancelledError:
        if workflow.cancellation_reason() is None:
            handle.cancel()  # not the run's cancel: the step goes with whatever cancelled it
            raise
        await workflow.wait_condition(lambda: True)  # conditions run once nothing else can
        if not handle.done():
            handle.cancel()
        return await handle


def spent(err: ActivityError) -> tuple[PartialSpend | None, str]:
    """What a cancelled model call reported it spent, or None with why nobody can tell."""
    cause = err.cause
    if isinstance(cause, ApplicationError) and cause.type == MODEL_CANCELLED and cause.details:
        try:
            return PartialSpend.model_validate(cause.details[0]), ""
        except Exception:  # noqa: BLE001 - an unreadable report is an unknown spend, said so
            return None, "its report could not be read"
    if isinstance(cause, ApplicationError):
        return None, f"it ended with {cause.type or 'an error'} before it could report"
    return None, f"it stopped ({type(cause).__name__}) without reporting"


def end_step(s: AgentState, record: StepRecord, err: BaseException) -> None:
    """If the run was cancelled, record what the step that ended meanwhile spent; end the run."""
    if not _requested():
        return
    record.status = "cancelled"
    what = "nothing spent"
    if isinstance(err, ActivityError) and getattr(err.cause, "type", "") == MODEL_CANCELLED:
        spend, how = spent(err)
        if spend is None:
            s.cost_known, what = False, f"tokens unknown ({how})"
        else:
            record.attempt, record.tokens = spend.attempt, spend.usage.total
            record.cost_usd = spend.cost_usd
            s.total_tokens += spend.usage.total
            s.cost_usd += spend.cost_usd or 0.0
            s.cost_known = s.cost_known and spend.cost_usd is not None
            what = f"{spend.usage.total:,} tokens" + ("" if spend.known else " reported so far")
    record.summary = f"cancelled with the run: {what}"[:160]
    raise CancelledError("the run was cancelled while this step ran") from err


def honour() -> None:
    """End the run now if it was cancelled while a step that answered anyway ran."""
    if _requested():
        raise CancelledError("the run was cancelled; the step it was running is recorded")


class _Steering(Protocol):
    def undelivered(self, why: str = "") -> None: ...


class _Run(Protocol):
    gates: Gates
    steering: _Steering


def shown(run: Callable[[Any, R], Awaitable[T]]) -> Callable[[Any, R], Awaitable[T]]:
    """The workflow's run method; a cancelled run shows state `cancelled` and its totals.

    Steers it took and never delivered say so in the ledger, as they do when a run completes.
    """

    @functools.wraps(run)
    async def ending(self: _Run, input: R) -> T:
        try:
            return await run(self, input)
        except workflow.ContinueAsNewError:
            raise  # waiting steers go to the next run with the state
        except BaseException as err:
            if is_cancelled_exception(err) and _requested():
                self.steering.undelivered("the run was cancelled first")
                self.gates.set_state("cancelled", "cancelled on request")
            elif isinstance(err, FailureError):
                self.steering.undelivered("the run failed first")
            raise

    return ending
