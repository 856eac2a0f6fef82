"""The invariants every scenario must keep, checked against the downstream and the histories.

- `effect_once`: no effect key has more than one row downstream, and every effect step the
  ledger records as completed has exactly one, its own or (a sub-agent's) its child's.
- `told_failed`: no tool result the model read for an effect whose row exists is an error or
  says it failed, was not run or did not happen.
- `workflow_task_failed`: no history holds a failed workflow task (Temporal's own benign
  `UnhandledCommand`, a signal racing a task's completion, aside).
- `stuck`: every run ended: done, refused or cancelled (parked states were moved on by their
  documented commands while the scenario ran). A run in `request_invalid` is stuck at once:
  the API rejects the request the run built, which no scenario's operator can fix.
- `failed`: no run failed or was terminated. A deploy that changes a tool the run calls under
  `on_change="refuse"` parks it in `tool_changed` (it failed before); the driver resumes it
  with `replan`, as nothing rolls a scenario's deploy back. One failure is documented (see
  `waypoint fork`): a fork whose source compacted the fork's turn after the fork was asked,
  before the fork loaded it, fails with `CannotFork` and nothing run (seed 576 met it).
- `billing`: the ledger's tokens never exceed what the model server billed, and what it billed
  beyond the ledger is no more than the answers to model attempts the histories show were lost
  (a worker killed, a step timed out or was cancelled after the server answered); with none
  lost, equal. The ledger is the run's result, or, for a cancelled run, what its memo shows
  once it ended (state `cancelled`, final totals): what a user sees with no worker up. No run
  spent past its cost budget.
- `replay`: every history replays under the current code.
- `worker_exit`: a SIGTERMed worker exits 0.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

from temporalio.api.enums.v1 import EventType, WorkflowTaskFailedCause
from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
)
from temporalio.exceptions import ActivityError, ApplicationError, ChildWorkflowError
from temporalio.worker import Replayer

from waypoint.client import runs, views
from waypoint.protocol import RunMemo, RunResult, Usage
from waypoint.protocol.queues import agent_queue
from waypoint.torture.agent import NAME
from waypoint.torture.runner import ModelServer, Outcome
from waypoint.workflows import AgentWorkflow

INVARIANTS = (
    "effect_once",
    "told_failed",
    "workflow_task_failed",
    "stuck",
    "failed",
    "billing",
    "replay",
    "worker_exit",
)
EFFECT_TOOLS = {"ship", "pay", "transfer", "bank_transfer"}
BENIGN_TASK_FAILURES = {WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_UNHANDLED_COMMAND}
ENDED = {"done", "refused", "cancelled"}
NOT_HAPPENED = re.compile(
    r"not run|not executed|failed|did not happen|nothing happened|abandoned|not happen",
    re.IGNORECASE,
)
"""What a tool result says when it tells the model the effect did not happen."""
MODEL_ACTIVITY = "waypoint.call_model"


async def check(client: Client, outcome: Outcome, api: ModelServer | None) -> list[str]:
    """Every broken invariant, as `name: what happened`; empty when the scenario passed."""
    found: list[str] = [f"stuck: {s}" for s in outcome.stuck]
    found += [f"worker_exit: a SIGTERMed worker exited {c}" for c in outcome.exit_codes if c]
    lost: list[int] = []
    found += await histories(client, outcome.task_queue, NAME, lost)
    results: dict[str, RunResult] = {}
    cancelled: dict[str, RunMemo | None] = {}
    for run in outcome.run_ids:
        handle = runs.handle(client, run)
        described = await handle.describe()
        if described.status == WorkflowExecutionStatus.COMPLETED:
            results[run] = await handle.result()
        elif described.status == WorkflowExecutionStatus.CANCELED:
            cancelled[run] = await views.memo(described)
        elif described.status == WorkflowExecutionStatus.FAILED:
            failure = await failure_of(handle)
            if not fork_raced_compaction(run, failure):
                found.append(f"failed: {run} failed: {failure}")
        elif described.status in (
            WorkflowExecutionStatus.TERMINATED,
            WorkflowExecutionStatus.TIMED_OUT,
        ):
            found.append(f"failed: {run} ended {described.status}")
    for run, result in results.items():
        if result.state not in ENDED:
            found.append(f"stuck: {run} returned in state {result.state}")
        limit = outcome.limits.get(run)
        if limit and limit.max_cost_usd is not None and result.cost_usd > limit.max_cost_usd:
            found.append(
                f"billing: {run} spent {result.cost_usd:.4f} past its budget {limit.max_cost_usd}"
            )
    found += _effects(outcome, results)
    if api is not None:
        found += _told_failed(outcome, _bodies(api))
        if len(outcome.run_ids) == 1:
            found += _main_billing(outcome.run_ids[0], results, cancelled, api, sum(lost))
    return found


def _main_billing(
    run: str,
    results: dict[str, RunResult],
    cancelled: dict[str, RunMemo | None],
    api: ModelServer,
    lost: int,
) -> list[str]:
    """`_billing` of the scenario's run, from its result or, cancelled, its final memo."""
    if run in results:
        tokens = results[run].total_tokens
    elif run in cancelled:
        memo = cancelled[run]
        if memo is None or memo.state != "cancelled":
            shown = memo.state if memo else "no memo"
            return [f"billing: {run} was cancelled but its memo says {shown}, not its final totals"]
        tokens = memo.total_tokens
    else:
        return []  # failed or stuck: those invariants say so
    return _billing(tokens, [_total(u) for u in api.usages], lost)


def _billing(ledger: int, billed: list[int], lost: int) -> list[str]:
    """The ledger holds what was billed, less at most the `lost` answers nobody recorded."""
    total = sum(billed)
    unrecorded = sum(sorted(billed, reverse=True)[:lost])
    if ledger > total or total - ledger > unrecorded:
        return [
            f"billing: the server billed {total} tokens in {len(billed)} answers, the ledger "
            f"says {ledger}; {lost} model attempts were lost (at most {unrecorded} tokens)"
        ]
    return []


FORK_ID = re.compile(r"(?P<source>.+)-fork(?P<turn>\d+)-[0-9a-f]{6}")
"""The id `runs.fork` gives a fork: its source run and the turn it forks after."""
COMPACTED_UNDER_FORK = re.compile(
    r"CannotFork: cannot fork '(?P<source>[^']+)' after turn (?P<turn>\d+): "
    r"turns 1-(?P<compacted>\d+) were compacted into a summary"
)


def fork_raced_compaction(run: str, failure: str) -> bool:
    """A fork's documented failure: its own source compacted its own turn before it loaded it.

    Any other fork failure (another run or turn named, the turn not among those compacted)
    is a violation: a fork that asked for the wrong state must not hide behind the race.
    """
    fork, said = FORK_ID.fullmatch(run), COMPACTED_UNDER_FORK.match(failure)
    return bool(
        fork
        and said
        and said["source"] == fork["source"]
        and said["turn"] == fork["turn"]
        and int(said["turn"]) <= int(said["compacted"])
    )


async def failure_of(handle: WorkflowHandle[Any, Any]) -> str:
    """`type: message` of the error a failed run ended with."""
    try:
        await handle.result()
    except WorkflowFailureError as err:
        cause = err.cause
        while isinstance(cause, ActivityError | ChildWorkflowError) and cause.cause is not None:
            cause = cause.cause  # the error the activity or child raised
        if isinstance(cause, ApplicationError):
            return f"{cause.type}: {cause.message}"[:300]
        return f"{type(cause).__name__}: {cause}"[:300]
    return "no failure"


def _total(usage: dict[str, Any]) -> int:
    return Usage.model_validate({k: v for k, v in usage.items() if k in Usage.model_fields}).total


def _bodies(api: ModelServer) -> list[dict[str, Any]]:
    requests = getattr(api, "message_requests", [])
    return [r.body for r in requests if isinstance(r.body, dict)]


def _effects(outcome: Outcome, results: dict[str, RunResult]) -> list[str]:
    found: list[str] = []
    counts = outcome.downstream().counts()
    for key, n in counts.items():
        if n > 1:
            found.append(f"effect_once: {key} happened {n} times")
    for run, result in results.items():
        for record in result.ledger:
            if record.effect_key and record.status == "completed":
                below = f"{record.effect_key}/"  # a sub-agent's child's keys extend its own
                n = sum(
                    c for k, c in counts.items() if k == record.effect_key or k.startswith(below)
                )
                if n != 1:
                    found.append(
                        f"effect_once: {run} {record.step_id} is completed in the ledger but "
                        f"happened {n} times"
                    )
    return found


def _told_failed(outcome: Outcome, bodies: Iterable[dict[str, Any]]) -> list[str]:
    """A tool result for an effect that happened that is an error or says it did not happen."""
    happened = outcome.downstream().refs()
    found: set[str] = set()
    for body in bodies:
        calls: dict[str, tuple[str, str]] = {}
        for message in body.get("messages", []):
            content = message.get("content")
            if not isinstance(content, list):
                continue
            for block in content:
                if block.get("type") == "tool_use" and block.get("name") in EFFECT_TOOLS:
                    given = block.get("input", {})
                    ref = given.get("ref", given.get("payee"))  # the MCP transfer's is its payee
                    calls[block["id"]] = (block["name"], str(ref))
                if block.get("type") == "tool_result":
                    name, ref = calls.get(block.get("tool_use_id", ""), ("", ""))
                    said = json.dumps(block.get("content"))
                    told = block.get("is_error") or NOT_HAPPENED.search(said)
                    if ref in happened and told:
                        said = said[:160]
                        found.add(
                            f"told_failed: the model was told {name} {ref} failed ({said}) "
                            "but it happened"
                        )
    return sorted(found)


async def histories(
    client: Client, task_queue: str, agent: str, lost: list[int] | None = None
) -> list[str]:
    """No failed workflow task in any history of the task queue, and each replays.

    Runs live on their agent's queue (`waypoint.protocol.queues`); the shared one is searched too.
    `lost` gets, per history, how many model attempts ended without a recorded answer.
    """
    found: list[str] = []
    replayer = Replayer(workflows=[AgentWorkflow], data_converter=client.data_converter)
    query = f'TaskQueue IN ("{task_queue}", "{agent_queue(task_queue, agent)}")'
    async for execution in client.list_workflows(query):
        if execution.workflow_type != AgentWorkflow.__name__:
            continue
        handle = client.get_workflow_handle(execution.id, run_id=execution.run_id)
        history = await handle.fetch_history()
        if lost is not None:
            lost.append(_lost_model_attempts(history.events))
        for event in history.events:
            if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED:
                attrs = event.workflow_task_failed_event_attributes
                if attrs.cause not in BENIGN_TASK_FAILURES:
                    cause = WorkflowTaskFailedCause.Name(attrs.cause)
                    found.append(
                        f"workflow_task_failed: {execution.id} event {event.event_id} "
                        f"{cause}: {attrs.failure.message[:200]}"
                    )
        result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
        if result.replay_failure is not None:
            found.append(f"replay: {execution.id} {execution.run_id}: {result.replay_failure}")
    return found


def _lost_model_attempts(events: Iterable[Any]) -> int:
    """Model attempts whose answer (if the server gave one) no step recorded.

    History keeps only an activity's last attempt: the ones before it failed or timed out.
    """
    model: set[int] = set()
    attempts: dict[int, int] = {}
    lost = 0
    for event in events:
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attrs = event.activity_task_scheduled_event_attributes
            if attrs.activity_type.name == MODEL_ACTIVITY:
                model.add(event.event_id)
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            attrs = event.activity_task_started_event_attributes
            if attrs.scheduled_event_id in model:
                attempts[attrs.scheduled_event_id] = attrs.attempt
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            scheduled = event.activity_task_completed_event_attributes.scheduled_event_id
            if scheduled in model:
                lost += attempts.pop(scheduled, 1) - 1
    return lost + sum(attempts.values())  # failed, timed out or cancelled: every attempt
