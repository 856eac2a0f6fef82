"""What a scenario's histories recorded, read once for the invariants that judge from them.

The spend, budget and approval invariants (`waypoint._torture.billing`, `.approvals`) judge a run
by what Temporal recorded, not by what the workflow concluded or the driver remembers: every
model attempt's answer or the spend a cancelled call reported, the limits each execution began
with and each `raise_limits` sent, each decision delivered (signal or accepted update), each
tool step scheduled (when) and whether it completed, each sub-agent started, each approve's
receipt (what its Update answered) and whether the history ended cancelled, the state a fork
loaded from its source,
each spec the run loaded (its start snapshot, each replan's) and what each model call was sent
(prompt, model, settings) and when.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from waypoint.protocol import (
    AgentSpec,
    AgentState,
    Limits,
    ModelRequest,
    ModelResponse,
    PartialSpend,
    RunInput,
)
from waypoint.protocol.steps import MODEL_CANCELLED
from waypoint.protocol.vocabulary import API_REFUSED

MODEL_ACTIVITY = "waypoint.call_model"
TOOL_ACTIVITY = "waypoint.run_tool"
FORK_ACTIVITY = "waypoint.load_fork"
SPEC_ACTIVITY = "waypoint.load_spec"
CLOCK_ACTIVITY = "waypoint.clock"
LOST_TASK = (
    EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT,
    EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED,
)
DECISIONS = ("approve", "reject", "set_policy")
"""The signals and updates whose payloads `approvals` judges."""


@dataclass
class Decision:
    """An approve, reject or set_policy that reached a run (a signal, or an accepted update)."""

    event_id: int
    name: str
    payload: dict[str, Any]
    """As sent (JSON), so a payload this code cannot type is still seen."""

    @property
    def signature(self) -> str:
        """The signature's value, '' when unsigned: the same value in two chains is a copy."""
        signed = self.payload.get("signature")
        return str(signed.get("value", "")) if isinstance(signed, dict) else ""


@dataclass
class ToolStep:
    """A `run_tool` activity the run scheduled, and whether it completed."""

    event_id: int
    step_id: str
    tool: str
    arguments: dict[str, Any]
    completed: bool = False
    scheduled: float = 0.0
    """When it was scheduled (seconds since the epoch, the server's clock)."""
    ended: float = 0.0
    """When it completed (0: it did not)."""


@dataclass
class Sent:
    """A model call as scheduled: when, and the parts of the run's spec it carried."""

    step_id: str
    scheduled: float
    purpose: str
    system: str
    model: str
    settings: dict[str, Any]


@dataclass
class Cancelled:
    """A model call the run cancelled that reported what it had spent."""

    step_id: str
    spend: PartialSpend


@dataclass
class Spent:
    """The execution's spend once a model call's answer or report was recorded, and its cap."""

    step_id: str
    tokens: int
    """What the execution began with (carried across continue-as-new, loaded by a fork) plus
    every answer and report recorded up to this one."""
    cost_usd: float
    cap: Limits | None
    """The most generous limits in force while the call ran (from when it was scheduled)."""


@dataclass
class Execution:
    """One history: one execution of a run's chain (continue-as-new makes more)."""

    workflow_id: str
    run_id: str
    chain: str
    """The chain's first execution run id: the same across continue-as-new, new for a rerun."""
    start: int = 0
    """The start event's time in nanoseconds, to order a chain's executions."""
    input: RunInput | None = None
    answers: list[ModelResponse] = field(default_factory=list)
    """Every model attempt that answered and was recorded."""
    cancelled: list[Cancelled] = field(default_factory=list)
    unknowable: dict[str, int] = field(default_factory=dict)
    """Model attempts whose spend no one can know, by why: an earlier attempt a retry replaced
    (a worker killed, a reply dropped), one that timed out, was cancelled without a report
    (a worker stopping), or never closed."""
    limits: list[Limits] = field(default_factory=list)
    """The limits the execution began with, then each `raise_limits` sent to it."""
    decisions: list[Decision] = field(default_factory=list)
    tools: list[ToolStep] = field(default_factory=list)
    fork_state: AgentState | None = None
    """What a fork loaded from its source (`load_fork`'s recorded result)."""
    spent: list[Spent] = field(default_factory=list)
    specs: list[tuple[str, AgentSpec]] = field(default_factory=list)
    """Each spec the run loaded, by step (`t0.spec` its start snapshot, `tN.replan.K`)."""
    sent: list[Sent] = field(default_factory=list)
    """Every model call scheduled (each attempt's request is the same)."""
    clocks: list[float] = field(default_factory=list)
    """When each `waypoint.clock` answer was recorded (the freshness judge's clock)."""
    notices: list[Any] = field(default_factory=list)
    """Each delivery scheduled (`waypoint._torture.notices.Told`)."""
    lost_tasks: list[float] = field(default_factory=list)
    """When a workflow task timed out or failed (a worker killed under it): what it would
    have scheduled comes a task timeout later."""
    receipts: list[dict[str, Any]] = field(default_factory=list)
    """What each `approve` Update answered (a `Receipt`, as JSON)."""
    children: list[str] = field(default_factory=list)
    """The workflow id of each sub-agent the run started."""
    ended_cancelled: bool = False


async def read(client: Client, workflow_id: str, run_id: str, events: Iterable[Any]) -> Execution:
    """The evidence of one history."""
    ex = Execution(workflow_id, run_id, run_id)
    model: dict[int, str] = {}
    tools: dict[int, ToolStep] = {}
    forks: set[int] = set()
    specs: dict[int, str] = {}
    clocks: set[int] = set()
    attempts: dict[int, int] = {}
    caps: dict[int, Limits | None] = {}  # per model call: the limits in force since scheduled
    updates: dict[str, str] = {}  # update id -> its name, once accepted
    tokens, cost = 0, 0.0

    def spend(scheduled: int, usage_total: int, usd: float | None) -> None:
        nonlocal tokens, cost
        tokens, cost = tokens + usage_total, cost + (usd or 0.0)
        ex.spent.append(Spent(model[scheduled], tokens, cost, caps.pop(scheduled, None)))

    def widen(limits: Limits) -> None:
        for k, cap in caps.items():
            caps[k] = limits if cap is None else wider(cap, limits)

    def lose(why: str, n: int) -> None:
        if n > 0:
            ex.unknowable[why] = ex.unknowable.get(why, 0) + n

    for event in events:
        kind = event.event_type
        if kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
            attrs = event.workflow_execution_started_event_attributes
            ex.chain = attrs.first_execution_run_id or run_id
            ex.start = event.event_time.ToNanoseconds()
            ex.input = await decode_first(client, attrs.input.payloads, RunInput)
            if ex.input is not None:
                resumed = ex.input.resume
                given = (started_limits(ex.input), resumed.limits if resumed is not None else None)
                ex.limits += [lim for lim in given if lim is not None]
                if resumed is not None:
                    tokens, cost = resumed.total_tokens, resumed.cost_usd
        elif kind in LOST_TASK:
            ex.lost_tasks.append(event.event_time.ToNanoseconds() / 1e9)
        elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
            attrs = event.workflow_execution_signaled_event_attributes
            await _signal(client, ex, event.event_id, attrs.signal_name, attrs.input.payloads)
            if attrs.signal_name == "raise_limits" and ex.limits:
                widen(ex.limits[-1])
        elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
            request = event.workflow_execution_update_accepted_event_attributes.accepted_request
            updates[request.meta.update_id] = request.input.name
            await _signal(
                client, ex, event.event_id, request.input.name, request.input.args.payloads
            )
        elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_COMPLETED:
            attrs = event.workflow_execution_update_completed_event_attributes
            if updates.get(attrs.meta.update_id) == "approve":
                receipt = await decode_first(client, attrs.outcome.success.payloads, dict)
                ex.receipts += [receipt] if isinstance(receipt, dict) else []
        elif kind == EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED:
            started = event.start_child_workflow_execution_initiated_event_attributes
            ex.children.append(started.workflow_id)
        elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED:
            ex.ended_cancelled = True
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attrs = event.activity_task_scheduled_event_attributes
            name, step_id = attrs.activity_type.name, attrs.activity_id.split("#", 1)[0]
            at = event.event_time.ToNanoseconds() / 1e9
            if name == MODEL_ACTIVITY:
                model[event.event_id] = step_id
                caps[event.event_id] = ex.limits[-1] if ex.limits else None
                request = await decode_first(client, attrs.input.payloads, ModelRequest)
                if request is not None:
                    settings = request.settings.model_dump(mode="json")
                    ex.sent.append(
                        Sent(step_id, at, request.purpose, request.system, request.model, settings)
                    )
            elif name == SPEC_ACTIVITY:
                specs[event.event_id] = step_id
            elif name == CLOCK_ACTIVITY:
                clocks.add(event.event_id)
            elif name == FORK_ACTIVITY:
                forks.add(event.event_id)
            elif name == TOOL_ACTIVITY:
                call = await decode_first(client, attrs.input.payloads, dict)
                call = call if isinstance(call, dict) else {}
                tool = str(call.get("tool") or step_id.rsplit(".", 1)[-1])
                args = call.get("arguments")
                step = ToolStep(
                    event.event_id, step_id, tool, args if isinstance(args, dict) else {}, False, at
                )
                tools[event.event_id] = step
                ex.tools.append(step)
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            attrs = event.activity_task_started_event_attributes
            if attrs.scheduled_event_id in model:
                attempts[attrs.scheduled_event_id] = attrs.attempt
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            attrs = event.activity_task_completed_event_attributes
            scheduled = attrs.scheduled_event_id
            if scheduled in model:
                lose("retried", attempts.pop(scheduled, 1) - 1)
                answer = await decode_first(client, attrs.result.payloads, ModelResponse)
                if answer is not None:
                    ex.answers.append(answer)
                    spend(scheduled, answer.usage.total, answer.cost_usd)
                else:
                    lose("unreadable", 1)
            elif scheduled in tools:
                tools[scheduled].completed = True
                tools[scheduled].ended = event.event_time.ToNanoseconds() / 1e9
            elif scheduled in clocks:
                ex.clocks.append(event.event_time.ToNanoseconds() / 1e9)
            elif scheduled in specs:
                spec = await decode_first(client, attrs.result.payloads, AgentSpec)
                if spec is not None:
                    ex.specs.append((specs[scheduled], spec))
            elif scheduled in forks:
                ex.fork_state = await decode_first(client, attrs.result.payloads, AgentState)
                if ex.fork_state is not None:
                    tokens, cost = ex.fork_state.total_tokens, ex.fork_state.cost_usd
                    if ex.fork_state.limits is not None:
                        ex.limits.append(ex.fork_state.limits)
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED:
            attrs = event.activity_task_failed_event_attributes
            scheduled = attrs.scheduled_event_id
            if scheduled in model:
                attempt = attempts.pop(scheduled, 1)
                info = attrs.failure.application_failure_info
                reported = None
                if info.type == MODEL_CANCELLED:
                    reported = await decode_first(client, info.details.payloads, PartialSpend)
                if reported is not None and reported.usage.total:
                    ex.cancelled.append(Cancelled(model[scheduled], reported))
                    spend(scheduled, reported.usage.total, reported.cost_usd)
                    lose("retried", attempt - 1)
                elif info.type in API_REFUSED:  # the API answered an error: nothing billed
                    lose("retried", attempt - 1)
                else:  # a transport failure, or cut before the server said a thing
                    lose("failed" if reported is None else "cut_before_usage", attempt)
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT:
            scheduled = event.activity_task_timed_out_event_attributes.scheduled_event_id
            if scheduled in model:
                lose("timed_out", attempts.pop(scheduled, 1))
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_CANCELED:
            scheduled = event.activity_task_canceled_event_attributes.scheduled_event_id
            if scheduled in model:
                lose("cancelled_unreported", attempts.pop(scheduled, 1))
    lose("open", sum(attempts.values()))
    return ex


def wider(a: Limits, b: Limits) -> Limits:
    """Each budget at the larger of the two (None, no budget, is the largest)."""

    def most(x: float | None, y: float | None) -> float | None:
        return None if x is None or y is None else max(x, y)

    budgets = ("max_cost_usd", "max_total_tokens")
    return a.model_copy(update={k: most(getattr(a, k), getattr(b, k)) for k in budgets})


def started_limits(given: RunInput) -> Limits | None:
    """The limits `given` starts a run under: its whole `limits`, or those set over its agent's.

    The torture agent's are the defaults: only a later build changes them, which no run adopts.
    """
    if given.limits_override is None:
        return given.limits
    return given.limits_override.over(given.limits or Limits())


async def _signal(
    client: Client, ex: Execution, event_id: int, name: str, payloads: Iterable[Payload]
) -> None:
    if name == "raise_limits":
        limits = await decode_first(client, payloads, Limits)
        if limits is not None:
            ex.limits.append(limits)
    elif name in DECISIONS:
        raw = await decode_first(client, payloads, dict)
        if isinstance(raw, dict):
            ex.decisions.append(Decision(event_id, name, raw))


async def decode_first(client: Client, payloads: Iterable[Payload], kind: type) -> Any:
    """The first payload decoded as `kind`, or None when it cannot be."""
    given = list(payloads)
    if not given:
        return None
    try:
        return (await client.data_converter.decode(given[:1], [kind]))[0]
    except Exception:  # noqa: BLE001 - a payload the run itself would refuse: not evidence
        return None


def chains(executions: Iterable[Execution]) -> dict[tuple[str, str], list[Execution]]:
    """Executions by (workflow id, chain), each chain's in the order they started."""
    out: dict[tuple[str, str], list[Execution]] = {}
    for ex in executions:
        out.setdefault((ex.workflow_id, ex.chain), []).append(ex)
    for group in out.values():
        group.sort(key=lambda e: e.start)
    return out
