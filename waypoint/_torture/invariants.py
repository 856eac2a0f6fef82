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
- `billing`: the scenario's ledgers (the run's, plus each fork's beyond what it carried from
  its source) never exceed what the model server billed less the output it never told a cut
  call of, and fall short of that by no more than one answer per model attempt whose spend
  nobody can know (an attempt a retry replaced: a worker killed mid-call, a reply dropped; one
  that timed out, or was cancelled without a report); with none, equal. Those attempts are
  counted (`excused:<why>` in the soak's faults). A call a steer or cancel cut is not among
  them: what it reported is judged by `cancelled_spend`. The ledger is a run's result, or,
  for a cancelled run, what its memo shows once it ended (state `cancelled`, final totals).
- `cancelled_spend`: every model call a steer or cancel cut that reported what it had spent
  (its history's `ModelStepCancelled` failure) was billed by the server (an answer of the same
  prompt), is on its step's ledger line when the run's result holds that line, and is in the
  run's totals, which hold at least its history's answers and those reports.
- `budget`: no run, whatever its end (done, cancelled, parked, failed, a fork), spent past
  the largest `max_cost_usd` or `max_total_tokens` its history shows in force (what each
  execution began with, a fork what it loaded, every `raise_limits` sent).
- `fork_billing`: a fork starts its totals from exactly its source's spend up to the fork
  point (the tokens of the source's ledger lines of turns 1..N, and of the lines the fork
  kept), never more than its source spent, and adds at least its own history's answers.
- `approval_gate`: every effect whose tool always asks (`transfer`) or that the policy in force
  asks for (an operator's `set_policy`, for a fork the one its kept ledger names) ran only
  after an approve of that step (or a remembering approve of its tool) reached its own run's
  chain; a denied one never ran; a signed decision first seen by another chain (replayed onto
  a rerun) counts for nothing (`waypoint._torture.approvals`).
- `approval_receipt`: an approve's receipt said `runs: true` only of a call that then started in
  its chain (one that ended cancelled excused), `runs: false` only of one that never did.
- `fresh_reads`, `fork_reads`, `replan_keeps_spec`: issue 48's promises, what an effect acted
  on, what a fork saw, what a replan adopted (`waypoint._torture.promises`).
- each simple verb's own (pause's `paused_still`), declared and described beside its draw and
  driver in its entry of `waypoint._torture.verbs.TORTURE`.
- `deploy_check`: `waypoint deploy check` of the running build, whenever a scenario runs it,
  reports no open run broken (its build did not change under it).
- `notice_once`, `notice_beside`: a wait is told each thing once under one key, and no step
  waited for a delivery (`waypoint._torture.notices`).
- `replay`: every history replays under the current code.
- `started_as_drawn`: the run began with the task, limits, step options, history budget and
  durability the scenario drew, started on the console's form or by the client (`starts`).
A rerun's first chain is judged as a run of its own (its end, its effects), and its spend is
in the scenario's joint ledger; forks are of the first chain.
- `worker_exit`: a SIGTERMed worker exits 0.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

from temporalio.api.enums.v1 import EventType, WorkflowTaskFailedCause
from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
)
from temporalio.exceptions import ActivityError, ApplicationError, ChildWorkflowError
from temporalio.worker import Replayer

from waypoint._torture import billing, evidence, notices, quiet
from waypoint._torture.agent import EFFECT_TOOLS, NAME
from waypoint._torture.approvals import approval_gate, approval_receipt
from waypoint._torture.billing import Total
from waypoint._torture.evidence import Execution
from waypoint._torture.promises import FORK_ID, promises
from waypoint._torture.runner import ModelServer, Outcome
from waypoint._torture.starts import started_as_drawn
from waypoint._torture.verbs import TORTURE
from waypoint._workflows import AgentWorkflow
from waypoint.client import runs, views
from waypoint.protocol import RunResult
from waypoint.protocol.queues import agent_queue
from waypoint.protocol.states import FINAL_STATES

T = TypeVar("T")

INVARIANTS = (
    "effect_once",
    "told_failed",
    "workflow_task_failed",
    "stuck",
    "failed",
    "billing",
    "cancelled_spend",
    "budget",
    "fork_billing",
    "approval_gate",
    "approval_receipt",
    "fresh_reads",
    "fork_reads",
    "replan_keeps_spec",
    *(v.invariant for v in TORTURE if v.judge),
    "deploy_check",
    "replay",
    "worker_exit",
    "read_wrote",
    "notice_once",
    "notice_beside",
    "started_as_drawn",
)
BENIGN_TASK_FAILURES = {WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_UNHANDLED_COMMAND}
NOT_HAPPENED = re.compile(
    r"not run|not executed|failed|did not happen|nothing happened|abandoned|not happen",
    re.IGNORECASE,
)
"""What a tool result says when it tells the model the effect did not happen."""


async def check(client: Client, outcome: Outcome, api: ModelServer | None) -> list[str]:
    """Every broken invariant, as `name: what happened`; empty when the scenario passed.

    What the spend invariants excuse as unknowable is counted in `outcome.faults`
    (`excused:<why>`), so the soak's table shows how much of the bill went unjudged.
    """
    found: list[str] = [f"stuck: {s}" for s in outcome.stuck]
    found += [f"worker_exit: a SIGTERMed worker exited {c}" for c in outcome.exit_codes if c]
    executions: list[Execution] = []
    found += await histories(client, outcome.task_queue, NAME, executions)
    if outcome.started is not None:
        found += started_as_drawn(outcome.run_ids[0], outcome.started, executions)
    found += [f"deploy_check: {d}" for d in outcome.deploy_check]
    results: dict[str, RunResult] = {}
    totals: dict[str, Total] = {}
    for run in outcome.run_ids:
        found += await _judge(runs.handle(client, run), run, results, totals)
    first: dict[str, RunResult] = {}  # a rerun's first chain: its result and totals
    first_totals: dict[str, Total] = {}
    for run, run_id in outcome.reruns.items():
        handle = client.get_workflow_handle(run, run_id=run_id, result_type=RunResult)
        found += await _judge(handle, run, first, first_totals)
    joint = dict(totals)
    for run, was in first_totals.items():
        now = totals.get(run)
        if now is not None:
            joint[run] = Total(
                was.tokens + now.tokens, was.cost_usd + now.cost_usd, was.final and now.final
            )
    both = {**results, **{f"{run} (its first run)": r for run, r in first.items()}}
    for run, result in both.items():
        if result.state not in FINAL_STATES:
            found.append(f"stuck: {run} returned in state {result.state}")
    found += _effects(outcome, both)
    found += [f for v in TORTURE if v.judge for f in v.judge(results, executions)]
    found += billing.budget(outcome.run_ids, totals, executions)
    # Forks are of a rerun's first chain (the driver forks no rerun).
    found += billing.fork_billing(
        outcome.run_ids,
        first_chains(totals, first_totals, outcome.reruns),
        first_chains(results, first, outcome.reruns),
        executions,
    )
    found += approval_gate(executions) + approval_receipt(executions)
    told = {chain: [e.notices for e in ex] for chain, ex in evidence.chains(executions).items()}
    found += notices.notice_once(told, outcome.folder / "inbox.db")
    downstream = outcome.downstream()
    found += promises(executions, downstream.reads(), downstream.written(), downstream.counts())
    if api is not None:
        found += _told_failed(outcome, _bodies(api))
        bill = billing.match([billing.usage_of(u) for u in api.usages], executions)
        found += billing.cancelled_spend(outcome.run_ids, totals, results, executions, bill)
        ledger = billing.joint_ledger(outcome.run_ids, joint, executions)
        if ledger is not None:
            excused: dict[str, int] = {}
            found += billing.billing(ledger, bill, billing.unknowable(executions), excused)
            for why, n in excused.items():
                outcome.faults[f"excused:{why}"] = outcome.faults.get(f"excused:{why}", 0) + n
    return found


def first_chains(
    last: Mapping[str, T], first: Mapping[str, T], reruns: Iterable[str]
) -> dict[str, T]:
    """Each run's first chain's result or totals, for judging its forks.

    A rerun's never stands in for a first chain that has none (seed 6279: the fork of a
    cancelled run was judged by its rerun's ledger).
    """
    again = set(reruns)
    return {**{run: v for run, v in last.items() if run not in again}, **first}


async def _judge(
    handle: WorkflowHandle[Any, RunResult],
    run: str,
    results: dict[str, RunResult],
    totals: dict[str, Total],
) -> list[str]:
    """One chain's end: its result or memo totals into `results` and `totals`; how it failed."""
    found: list[str] = []
    described = await handle.describe()
    if described.status == WorkflowExecutionStatus.COMPLETED:
        result = results[run] = await handle.result()
        totals[run] = Total(result.total_tokens, result.cost_usd, final=True)
    else:
        memo = await views.memo(described)  # what a user sees with no worker up
        ended = memo is not None and memo.state == "cancelled"
        if memo is not None:
            totals[run] = Total(memo.total_tokens, memo.cost_usd, final=ended)
        if described.status == WorkflowExecutionStatus.CANCELED and not ended:
            shown = memo.state if memo else "no memo"
            found.append(
                f"billing: {run} was cancelled but its memo says {shown}, not its final totals"
            )
    if described.status == WorkflowExecutionStatus.FAILED:
        failure = await failure_of(handle)
        if not fork_raced_compaction(run, failure):
            found.append(f"failed: {run} failed: {failure}")
    elif described.status in (
        WorkflowExecutionStatus.TERMINATED,
        WorkflowExecutionStatus.TIMED_OUT,
    ):
        found.append(f"failed: {run} ended {described.status}")
    return found


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
    happened = set(outcome.downstream().refs())
    if outcome.reruns or len(outcome.run_ids) > 1:
        rows = outcome.downstream().rows()
        happened = _in_every_chain(rows, outcome.run_ids, outcome.reruns)
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


def _in_every_chain(
    rows: list[tuple[str, str]], runs: Iterable[str] = (), reruns: Iterable[str] = ()
) -> set[str]:
    """The refs whose effect every chain of every run wrote (`workflow id/first run id/...`).

    A rerun's chain shares the workflow id and the scenario's refs, as a fork shares its
    source's, and a request shows which chain it comes from only through keys the model never
    reads; so a ref one chain wrote and another did not is not judged (seed 6181: the first
    run's pay truly never ran, its rerun's did; a fork's pay ran where its source's, told its
    read changed, did not). A rerun's earlier chain counts even where it wrote no row at all
    (seed 90069: its transfer was refused on a changed read, the rerun's ran). The effects
    themselves are still judged by key (`effect_once`).
    """
    chains = {"/".join(key.split("/")[:2]) for key, _ in rows}
    by_ref: dict[str, set[str]] = {}
    for key, ref in rows:
        by_ref.setdefault(ref, set()).add("/".join(key.split("/")[:2]))
    every, again = set(runs), set(reruns)

    def everywhere(wrote: set[str]) -> bool:
        ids = [c.split("/")[0] for c in wrote]
        twice = all(ids.count(w) >= 2 for w in again)  # the rerun and the chain before it
        return wrote >= chains and every <= set(ids) and twice

    return {ref for ref, wrote in by_ref.items() if everywhere(wrote)}


async def histories(
    client: Client, task_queue: str, agent: str, executions: list[Execution] | None = None
) -> list[str]:
    """No failed workflow task in any history of the task queue, and each replays.

    Runs live on their agent's queue (`waypoint.protocol.queues`); the shared one is searched too.
    `executions` gets what each history recorded (`waypoint._torture.evidence`).
    """
    found: list[str] = []
    replayer = Replayer(workflows=[AgentWorkflow], data_converter=client.data_converter)
    query = f'TaskQueue IN ("{task_queue}", "{agent_queue(task_queue, agent)}")'
    async for execution in client.list_workflows(query):
        if execution.workflow_type != AgentWorkflow.__name__:
            continue
        handle = client.get_workflow_handle(execution.id, run_id=execution.run_id)
        history = await handle.fetch_history()
        if executions is not None:
            executions.append(
                await evidence.read(client, execution.id, execution.run_id, history.events)
            )
            executions[-1].notices = await notices.told(client, history.events)
        found += notices.notice_beside(execution.id, history.events)
        for event in history.events:
            if (read := quiet.reader_wrote(event)) is not None:
                found.append(f"read_wrote: {execution.id} event {event.event_id}: {read}")
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
