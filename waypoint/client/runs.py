"""Client-side operations on runs: start, approve, reject, inspect. The CLI is a thin skin on these.

Everything here is an ordinary Temporal client call, so the same can be done with the
`temporal` CLI or the Web UI (e.g. `temporal workflow signal --name approve --input '{...}'`).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from temporalio.client import Client, WorkflowHandle, WorkflowQueryFailedError
from temporalio.common import SearchAttributePair, TypedSearchAttributes, WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError

import waypoint._content as content
from waypoint.client import hosts, views

# Re-exported: every verb of `waypoint.protocol.verbs.VERBS` is reachable as `runs.<name>`
# (the simple ones, made from their entries, by `__getattr__` below).
from waypoint.client.decisions import answer as answer
from waypoint.client.decisions import approve as approve
from waypoint.client.decisions import correct as correct
from waypoint.client.decisions import reject as reject
from waypoint.client.decisions import resolve as resolve
from waypoint.client.decisions import set_policy as set_policy
from waypoint.client.decisions import show_policy as show_policy
from waypoint.client.decisions import steer as steer
from waypoint.client.events import events as events  # re-exported: `runs.events(client, run)`
from waypoint.client.verbs import QUERY_TIMEOUT as QUERY_TIMEOUT
from waypoint.client.verbs import SIMPLE
from waypoint.client.verbs import cancel as cancel
from waypoint.client.verbs import raise_limits as raise_limits
from waypoint.client.verbs import resume as resume
from waypoint.errors import (
    RunIdTakenError,
    RunStuckError,
    SearchAttributesMissingError,
    WaypointError,
)
from waypoint.protocol import (
    AgentState,
    ForkSource,
    HistoryLimits,
    HistoryOverride,
    Limits,
    LimitsOverride,
    RichBlock,
    RunInput,
    RunResult,
    RunStatus,
    StepOptions,
    StepRecord,
    ToolOverride,
)
from waypoint.protocol import search_attributes as sa
from waypoint.protocol.queues import agent_queue
from waypoint.protocol.spec import Durability

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

WORKFLOW = "AgentWorkflow"
REJECT_DUPLICATE = WorkflowIDReusePolicy.REJECT_DUPLICATE
ALLOW_DUPLICATE = WorkflowIDReusePolicy.ALLOW_DUPLICATE


async def start_run(
    client: Client,
    agent: str,
    task: str,
    *,
    task_queue: str,
    workflow_id: str | None = None,
    limits: LimitsOverride | Limits | None = None,
    options: StepOptions | None = None,
    history: HistoryOverride | HistoryLimits | None = None,
    task_timeout: timedelta | None = None,
    attachments: Sequence[RichBlock] = (),
    rerun: bool = False,
    queue_anyway: bool = False,
    worker_wait: float = 15.0,
    durability: Durability | None = None,
    tool_options: Mapping[str, ToolOverride | Mapping[str, Any]] | None = None,
) -> WorkflowHandle[Any, RunResult]:
    """Start a run of `agent` on `task`; the worker snapshots the agent's spec as its first step.

    `limits`: a `LimitsOverride` sets those it names over the agent's own (each left None keeps
    the agent's; the run's ledger records them, `t0.limits.1`); a whole `Limits` replaces the
    agent's limits (one it leaves at its default is that default, not the agent's), as it did
    before overrides existed. `history`, the same for the history budget (when the run
    continues-as-new): a `HistoryOverride` part by part over the agent's, a `HistoryLimits` whole.
    `task_timeout` bounds one workflow task: a worker killed mid-task delays the run this long.
    `attachments` (`waypoint.image`, `waypoint.document`) go with the task in its first message.
    `rerun`: allow `workflow_id` of a run that already ran. The new run does its work again
    under new effect keys (a payment is made again), so it is never the default.
    `queue_anyway`: start the run even though no worker on the queue hosts `agent` (a worker
    still being deployed, or a run started before its worker on purpose); it waits for one,
    and `status` says so. Without it such a start is refused: a misspelt name would wait for
    ever. `worker_wait`: seconds to wait for a worker when none polls the queue at all (one
    being started beside this call); once one does, a start waits two seconds more at most
    (`waypoint.client.hosts`). `durability`: `step` or `turn` for this run, over the agent's
    (`Agent.durability`). `tool_options`: per-tool options over the agent's own for this run,
    by tool name (`ToolOverride`: `timeout`, `fresh_for`, ...; recorded with the run).

    Raises:
        ContentError: An attachment breaks the API's rules (checked before the run starts).
        AgentNotHostedError: No worker polling the queue hosts `agent` (and not
            `queue_anyway`); the message names the agents hosted there.
        RunIdTakenError: `workflow_id` is running, or already ran and `rerun` is not set.
    """
    for i, block in enumerate(attachments, start=1):
        content.check(block, f"attachment {i}")
    if not queue_anyway:
        await hosts.require_host(client, task_queue, agent, wait=worker_wait)
    run_input = RunInput(
        agent=agent,
        task=task,
        attachments=list(attachments),
        limits=limits if isinstance(limits, Limits) else None,
        limits_override=limits if isinstance(limits, LimitsOverride) else None,
        options=options or StepOptions(),
        history=history if isinstance(history, HistoryLimits) else None,
        history_override=history if isinstance(history, HistoryOverride) else None,
        durability=durability,
        tool_options={n: ToolOverride.model_validate(o) for n, o in (tool_options or {}).items()},
    )
    return await _start(
        client,
        run_input,
        id=workflow_id or f"{agent}-{uuid.uuid4().hex[:8]}",
        task_queue=agent_queue(task_queue, agent),
        result_type=RunResult,
        search_attributes=TypedSearchAttributes([SearchAttributePair(sa.AGENT, agent)]),
        static_summary=f"{agent}: {task[:200]}",
        task_timeout=task_timeout,
        id_reuse_policy=ALLOW_DUPLICATE if rerun else REJECT_DUPLICATE,
    )


async def _start(
    client: Client, run_input: RunInput, **options: Any
) -> WorkflowHandle[Any, RunResult]:
    """Start the workflow; a taken id or a server without our search attributes is one line.

    An id that already ran is refused unless `id_reuse_policy` allows it: a second run under a
    finished run's id would ask and act again under new effect keys.
    """
    options.setdefault("id_reuse_policy", REJECT_DUPLICATE)
    try:
        return await client.start_workflow(WORKFLOW, run_input, **options)
    except WorkflowAlreadyStartedError as err:
        raise await _taken(client, options["id"]) from err
    except RPCError as err:
        if "search attribute" in err.message.lower():
            raise SearchAttributesMissingError(
                "this Temporal namespace lacks Waypoint's search attributes: run `waypoint setup` "
                f"once ({err.message})"
            ) from err
        raise


async def _taken(client: Client, run: str) -> RunIdTakenError:
    """Why `run` cannot be started: it is running, or it ran and ended (how, and which run)."""
    view = await views.view(client, run, ask_worker=False)
    if not view.closed:
        return RunIdTakenError(
            f"a run with id {run!r} is already running: choose another --id, or "
            f"see `waypoint status {run}`"
        )
    return RunIdTakenError(
        f"run {run!r} already ran: it is {view.state} (Temporal run {view.run_id}); starting it "
        "again would do its work again under new effect keys. Choose another --id, or pass "
        f"--rerun (rerun=True) to run it again on purpose; see `waypoint ledger {run}`"
    )


def handle(client: Client, run: str) -> WorkflowHandle[Any, RunResult]:
    """The handle of a run by its workflow id."""
    return client.get_workflow_handle(run, result_type=RunResult)


async def status(client: Client, run: str, timeout: float = QUERY_TIMEOUT) -> RunStatus:
    """Query the run's status.

    Raises:
        RunNotFoundError: No run has that id.
        RunStuckError: No worker answers for the run, or the worker cannot replay it (e.g. a
            non-determinism error after a deploy changed a step's inputs).
    """
    answered = await views.live_status(client, run, timeout)
    if answered is None:
        raise RunStuckError(
            f"no worker answered for run {run!r} within {timeout:g}s: is `waypoint worker` "
            "running on the run's task queue?"
        )
    return answered


async def exists(client: Client, run: str) -> None:
    """Raise `RunNotFoundError` unless the run exists; needs no worker, unlike a query."""
    await views.describe(client, run)


async def ledger(client: Client, run: str) -> list[StepRecord]:
    """Every step of the run so far."""
    await status(client, run)
    return await handle(client, run).query("ledger", result_type=list[StepRecord])


async def whole_ledger(
    client: Client, run: str, carried: list[StepRecord]
) -> tuple[list[StepRecord], str]:
    """`carried` (the run's `ledger` or result ledger) with the steps it archived, in order.

    A long run carries only its recent and effect steps across continue-as-new; each step it
    left out is whole in the input (first history event) of a closed run of its chain. So this
    needs no worker, and walks back only as far as the archive reaches. Returns the ledger and
    a note saying how many archived steps could not be read back, and why ('' if none).
    """
    have = {r.step_id for r in carried}
    segments: list[list[StepRecord]] = []
    found: set[str] = set()
    wanted = 0
    try:
        run_id = (await handle(client, run).describe()).run_id
        while run_id:
            history = client.get_workflow_handle(run, run_id=run_id)
            first = await anext(aiter(history.fetch_history_events(page_size=1)))
            started = first.workflow_execution_started_event_attributes
            (given,) = await client.data_converter.decode_wrapper(started.input, [RunInput])
            if given.resume is None:
                break
            wanted = wanted or given.resume.archived.steps  # the newest input counts them all
            if len(found) >= wanted:
                break
            segments.insert(0, given.resume.ledger)
            found |= {r.step_id for r in given.resume.ledger} - have
            run_id = started.continued_execution_run_id
        why = "" if len(found) >= wanted else "not in this run's history (a fork: see its origin)"
    except Exception as err:  # noqa: BLE001 - what was read so far is still worth showing
        why = f"its history could not be read: {type(err).__name__}: {err}"
    merged: dict[str, StepRecord] = {}
    for records in [*segments, carried]:  # oldest first; a later copy of a step is newer
        merged.update({r.step_id: r for r in records})
    missing = max(0, wanted - len(found))
    note = f"{missing} earlier archived steps are missing: {why}" if missing else ""
    return list(merged.values()), note


async def state(client: Client, run: str) -> AgentState:
    """The run's whole state (spec, transcript, ledger, waits, counters)."""
    await status(client, run)
    return await handle(client, run).query("state", result_type=AgentState)


async def fork(
    client: Client,
    run: str,
    after_turn: int,
    *,
    task_queue: str,
    note: str | None = None,
    workflow_id: str | None = None,
    reviewer: str = "",
    signing_key: Ed25519PrivateKey | None = None,
) -> WorkflowHandle[Any, RunResult]:
    """Start a new run that reuses `run`'s recorded steps up to the end of `after_turn`.

    Nothing recorded before the fork point runs again; its effects keep their original keys.
    The fork names its source and loads the state itself: a run takes no state from a client.
    So a run still going may compact `after_turn` between this check and that load; the fork
    then fails with `CannotFork`, having run nothing. `reviewer` is named on the fork's first
    ledger line; with `signing_key` the fork is signed for its own workflow id, and a fork of a
    `signed_decisions` agent checks that before it loads anything (`CannotFork` if unsigned).
    """
    await status(client, run)
    try:
        start = await handle(client, run).query("fork_state", after_turn, result_type=AgentState)
    except WorkflowQueryFailedError as err:
        raise WaypointError(f"cannot fork {run!r} after turn {after_turn}: {err}") from err
    fork_id = workflow_id or f"{run}-fork{after_turn}-{uuid.uuid4().hex[:6]}"
    source = ForkSource(workflow_id=run, after_turn=after_turn, note=note or None)
    source = source.model_copy(update={"reviewer": reviewer})
    if signing_key is not None:  # for the fork's own id: no chain, the fork has not started
        from waypoint._security.signing import sign

        source = sign(signing_key, fork_id, "", "fork", source)
    fresh = {"resume": None, "stream": None, "parent": None, "fork": source}
    run_input = start.input.model_copy(update=fresh)
    return await _start(
        client,
        run_input,
        id=fork_id,
        task_queue=agent_queue(task_queue, start.input.agent),
        result_type=RunResult,
        search_attributes=TypedSearchAttributes([SearchAttributePair(sa.AGENT, start.input.agent)]),
        static_summary=f"fork of {run} after turn {after_turn}",
    )


def __getattr__(name: str) -> Any:
    """`runs.pause`, `runs.unpause`: a simple verb's client function (`verbs.SIMPLE`)."""
    if name in SIMPLE:
        return SIMPLE[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
