"""The invariants every scenario must keep, checked against the downstream and the histories.

- `effect_once`: no effect key has more than one row downstream, and every effect step the
  ledger records as completed has exactly one.
- `told_failed`: no tool result the model read says an effect failed when its row exists.
- `workflow_task_failed`: no history holds a failed workflow task (Temporal's own benign
  `UnhandledCommand`, a signal racing a task's completion, aside).
- `stuck`: every run ended: done, refused or cancelled (parked states were moved on by their
  documented commands while the scenario ran).
- `failed`: no run failed or was terminated.
- `billing`: the ledger's tokens equal what the model server billed (when no worker died
  with a call in flight), and no run spent past its cost budget.
- `replay`: every history replays under the current code.
- `worker_exit`: a SIGTERMed worker exits 0.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from temporalio.api.enums.v1 import EventType, WorkflowTaskFailedCause
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from waypoint import runs
from waypoint.models import RunResult, Usage
from waypoint.queues import agent_queue
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
EFFECT_TOOLS = {"ship", "pay", "transfer"}
BENIGN_TASK_FAILURES = {WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_UNHANDLED_COMMAND}
ENDED = {"done", "refused", "cancelled"}


async def check(client: Client, outcome: Outcome, api: ModelServer | None) -> list[str]:
    """Every broken invariant, as `name: what happened`; empty when the scenario passed."""
    found: list[str] = [f"stuck: {s}" for s in outcome.stuck]
    found += [f"worker_exit: a SIGTERMed worker exited {c}" for c in outcome.exit_codes if c]
    found += await histories(client, outcome.task_queue, NAME)
    results: dict[str, RunResult] = {}
    for run in outcome.run_ids:
        handle = runs.handle(client, run)
        described = await handle.describe()
        if described.status == WorkflowExecutionStatus.COMPLETED:
            results[run] = await handle.result()
        elif described.status in (
            WorkflowExecutionStatus.FAILED,
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
        main = results.get(outcome.run_ids[0])
        alone = len(outcome.run_ids) == 1 and not outcome.restarts
        if main is not None and alone:
            billed = sum(_total(u) for u in api.usages)
            if billed != main.total_tokens:
                found.append(
                    f"billing: the server billed {billed} tokens, the ledger says "
                    f"{main.total_tokens}"
                )
    return found


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
                n = counts.get(record.effect_key, 0)
                if n != 1:
                    found.append(
                        f"effect_once: {run} {record.step_id} is completed in the ledger but "
                        f"happened {n} times"
                    )
    return found


def _told_failed(outcome: Outcome, bodies: Iterable[dict[str, Any]]) -> list[str]:
    """A tool result marked as an error for an effect call whose effect happened."""
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
                    calls[block["id"]] = (block["name"], str(block.get("input", {}).get("ref")))
                if block.get("type") == "tool_result" and block.get("is_error"):
                    name, ref = calls.get(block.get("tool_use_id", ""), ("", ""))
                    if ref in happened:
                        said = json.dumps(block.get("content"))[:160]
                        found.add(
                            f"told_failed: the model was told {name} {ref} failed ({said}) "
                            "but it happened"
                        )
    return sorted(found)


async def histories(client: Client, task_queue: str, agent: str) -> list[str]:
    """No failed workflow task in any history of the task queue, and each replays.

    Runs live on their agent's queue (`waypoint.queues`); the shared one is searched too.
    """
    found: list[str] = []
    replayer = Replayer(workflows=[AgentWorkflow], data_converter=pydantic_data_converter)
    query = f'TaskQueue IN ("{task_queue}", "{agent_queue(task_queue, agent)}")'
    async for execution in client.list_workflows(query):
        if execution.workflow_type != AgentWorkflow.__name__:
            continue
        handle = client.get_workflow_handle(execution.id, run_id=execution.run_id)
        history = await handle.fetch_history()
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
