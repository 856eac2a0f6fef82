"""Where a run's starting state may come from: its own continue-as-new, or the run it forks.

Deterministic code only. `RunInput` comes from any client with namespace access, and a state
it carried would bring its own ledger, spec, policy and remembered approvals, and (through
`state.input.parent`) another run's effect keys. So `RunInput.resume` is believed only when
Temporal says this run continued from an earlier run of itself. A fork names its source
(`RunInput.fork`) instead; the fork asks that run for its state in an activity and hands the
state to itself by continue-as-new, the one way a state enters a run.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from waypoint.protocol import AgentState, ForkSource, RunInput, StepRecord
    from waypoint.protocol.hashing import keyed_sha256_hex
    from waypoint.protocol.signatures import DecisionCheck, DecisionVerdict, fields
    from waypoint.protocol.vocabulary import CANNOT_FORK

from waypoint._workflows import policy
from waypoint._workflows.steps import Steps

FORK = "fork"
"""What a reviewer signs a fork as (`waypoint.protocol.verbs.VERBS`'s `fork`)."""

LOADING = "the fork is still loading the state it starts from: send it again in a moment"
"""Why a signal or policy change sent while a fork loads is refused (it would be lost)."""


def check_resume(run: RunInput) -> None:
    """Refuse a `resume` state this run did not get from its own continue-as-new.

    A retried or cron run also reports the run before it, but with a client's original input:
    only a first attempt outside a cron schedule counts as continued.
    """
    if run.resume is None:
        return
    info = workflow.info()
    if info.continued_run_id is not None and info.attempt == 1 and not info.cron_schedule:
        return
    raise ApplicationError(
        f"run {info.workflow_id} was started with a `resume` state, but Temporal says it did "
        "not continue from an earlier run of itself: refused, since that state could carry "
        "another run's effect keys, spec or approvals. A run's state passes only by its own "
        "continue-as-new; to start from another run's steps, use `waypoint fork RUN "
        "--after-turn N` (runs.fork), which names the run instead",
        type="ForgedResume",
        non_retryable=True,
    )


async def load(run: RunInput, steps: Steps) -> RunInput:
    """The input this fork continues as new with: its source's state, asked of that run.

    The state's input becomes the fork's own (no sub-agent link: the fork is nobody's child,
    so its new steps take keys of its own); refusals recorded while loading are kept. A
    ledger line says where the fork came from and which policy it applies.
    """
    assert run.fork is not None
    fork = run.fork
    state = await workflow.execute_activity(
        "waypoint.load_fork",
        fork,
        result_type=AgentState,
        start_to_close_timeout=run.options.spec_timeout,
        heartbeat_timeout=run.options.tool_heartbeat_timeout,
        retry_policy=steps.retry_policy(5),
        summary=f"load fork of {fork.workflow_id} after turn {fork.after_turn}",
    )
    await _signed(state, fork, run)
    own = run.model_copy(update={"fork": None, "parent": None})
    notes = [*state.notes, fork.note] if fork.note else state.notes
    state = state.model_copy(
        update={
            "input": own,
            "notes": notes,
            "notices": {},  # the source's deliveries are its own, under its keys
            "ignored_signals": [*state.ignored_signals, *steps.s.ignored_signals],
        }
    )
    state.ledger.append(_forked(state, fork))
    return own.model_copy(update={"resume": state})


async def _signed(state: AgentState, fork: ForkSource, run: RunInput) -> None:
    """A fork of a `signed_decisions` agent runs nothing unless its reviewer signed it.

    The signature names the fork's own workflow id (the client chose it) and no chain: the
    fork's first execution is not known to whoever signs. Refused, the fork fails `CannotFork`.
    """
    spec = state.spec
    if spec is None or not spec.signed_decisions:
        return
    why = f"unsigned fork: {fork.workflow_id!r} accepts signed decisions only"
    if fork.signature is not None:
        check = DecisionCheck(
            kind=FORK,
            fields=fields(fork),
            signature=fork.signature,
            max_age_seconds=spec.decision_max_age.total_seconds(),
        )
        verdict = await workflow.execute_activity(
            "waypoint.verify_decision",
            check,
            result_type=DecisionVerdict,
            start_to_close_timeout=timedelta(seconds=30),
            retry_policy=RetryPolicy(maximum_attempts=3),
            summary=f"verify fork of {fork.workflow_id}",
        )
        why = "" if verdict.valid else verdict.reason
    if why:
        raise ApplicationError(
            f"cannot fork {fork.workflow_id!r} after turn {fork.after_turn}: {why}",
            type=CANNOT_FORK,
            non_retryable=True,
        )


def _forked(s: AgentState, fork: ForkSource) -> StepRecord:
    """The fork's own ledger line: its source, and the policy it applies from there on.

    The ledger it keeps shows the source's `policy set` and `remember` lines; this says which
    of them still hold (`policy.at_fork`).
    """
    n = 1 + sum(".fork." in r.step_id for r in s.ledger if r.kind == "operator")
    shown = policy.describe(s)
    remembered = sorted({r.tool or "?" for r in s.ledger if r.step_id.endswith(".remember")})
    if remembered:
        shown += (
            f"; approvals remembered on the source ({', '.join(remembered)}) are not carried: "
            "the fork asks again"
        )
    signed = fork.signature is not None and s.spec is not None and s.spec.signed_decisions
    by = f" by {fork.reviewer}{' (signed)' if signed else ''}" if fork.reviewer else ""
    return StepRecord(
        step_id=f"t{fork.after_turn}.fork.{n}",
        kind="operator",
        input_hash=keyed_sha256_hex(s.spec.hash_salt if s.spec else "", fork),
        status="completed",
        summary=f"forked from {fork.workflow_id} after turn {fork.after_turn}{by}; policy {shown}",
    )
