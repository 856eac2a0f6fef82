"""What every step shares: ids, input hashes, activity ids, the ledger. Deterministic code only.

Every step is an activity whose id is `"{step_id}#{input_hash[:12]}"`: Temporal compares activity
ids on replay, so a resume whose inputs changed fails with its non-determinism error instead of
silently reusing a stale result.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from waypoint.protocol import (
        AgentSpec,
        AgentState,
        LoadSpecInput,
        Message,
        StepRecord,
        ToolResultBlock,
    )
    from waypoint.protocol.hashing import canonical_json, keyed_sha256_hex, sha256_hex
    from waypoint.protocol.queues import agent_queue
    from waypoint.protocol.run import ReplacedPlan
    from waypoint.protocol.vocabulary import UNKNOWN_MODEL

from waypoint._workflows import events
from waypoint._workflows.gates import Gates
from waypoint._workflows.replan import adopt, adopted, forget_remembered
from waypoint._workflows.retries import backoff


def asked_again(step_id: str, why: str) -> str:
    """The model step asked again: `t3.model` -> `t3.model.c1` -> `t3.model.c2`.

    `why`: `c` on a compacted prompt, `s` with a steer's message, `f` with stale reads read
    again after a park.
    """
    head, _, last = step_id.rpartition(".")
    if last.startswith(why) and last[1:].isdigit():
        return f"{head}.{why}{int(last[1:]) + 1}"
    return f"{step_id}.{why}1"


def activity_id(record: StepRecord, retry: int = 0, changed: int = 0) -> str:
    """`{step_id}#{input_hash[:12]}`, `~cN` after the Nth resumed tool change, `~N` retries.

    `~N` is the Nth operator-ordered retry; `~cN` the Nth run of a step that parked in
    `tool_changed` and was resumed after a rollback.
    """
    base = f"{record.step_id}#{record.input_hash[:12]}"
    base = f"{base}~c{changed}" if changed else base
    return f"{base}~{retry}" if retry else base


Finish = Callable[..., ToolResultBlock]
"""Answers one tool call: `finish(content, is_error, status="")` (`ToolSteps.finisher`)."""

StepFailure = (ActivityError, ApplicationError)
"""What a failed step raises: a local activity's failure can arrive as the bare
`ApplicationError` rather than wrapped in an `ActivityError`; both mean the step failed."""


def failure(err: ActivityError | ApplicationError) -> tuple[str, str]:
    """The error type and message an activity failed with."""
    if isinstance(err, ApplicationError):
        return err.type or "", err.message
    cause = err.cause
    if isinstance(cause, ApplicationError):
        return cause.type or "", cause.message
    return "", str(cause or err)


class Steps:
    """Keeps the ledger and the transcript, loads the spec; model and tool steps build on it."""

    def __init__(self, s: AgentState, gates: Gates, publish: Callable[[], None]) -> None:
        self.s = s
        self.gates = gates
        self.publish = publish
        self._replanning = asyncio.Lock()
        """Held while a replan loads the spec: calls of one reply that notice a change side by
        side wait for that one step instead of scheduling a second under the same activity id."""

    @property
    def spec(self) -> AgentSpec:
        """The spec in force: the run's snapshot, whose tools change only by a recorded replan."""
        assert self.s.spec is not None
        return self.s.spec

    def record(
        self, step_id: str, kind: str, input_hash: str, tool: str | None = None
    ) -> StepRecord:
        """Add a step to the ledger before it is scheduled."""
        record = StepRecord(step_id=step_id, kind=kind, tool=tool, input_hash=input_hash)  # type: ignore[arg-type]
        self.s.ledger.append(record)
        events.sync()
        return record

    def agent_queue(self) -> str:
        """The queue only workers hosting the run's agent poll, for every step of the run.

        On the run's own queue a worker without the agent would take them and fail the run.
        """
        return agent_queue(workflow.info().task_queue, self.s.input.agent)

    def retry_policy(self, maximum_attempts: int) -> RetryPolicy:
        """The run's backoff with a step-specific attempt cap."""
        return backoff(self.s.input.options, maximum_attempts)

    # --- spec -------------------------------------------------------------------------------

    async def load_spec(self, step_id: str, provider: str | None = None) -> AgentSpec:
        """Snapshot the agent's definition from the worker, as a recorded step."""
        s = self.s
        consumed = s.input.agent if provider is None else [s.input.agent, provider]
        record = self.record(step_id, "spec", sha256_hex(consumed))
        retry = 0
        while True:
            try:
                spec = await workflow.execute_activity(
                    "waypoint.load_spec",
                    LoadSpecInput(agent=s.input.agent, provider=provider),  # type: ignore[arg-type]
                    result_type=AgentSpec,
                    task_queue=self.agent_queue(),
                    activity_id=activity_id(record, retry),
                    start_to_close_timeout=s.input.options.spec_timeout,
                    heartbeat_timeout=s.input.options.tool_heartbeat_timeout,
                    retry_policy=self.retry_policy(5),
                    summary=f"load spec {s.input.agent}",
                )
                break
            except ActivityError as err:
                kind, message = failure(err)
                if kind != UNKNOWN_MODEL:
                    raise
                # A model id the API does not know: park, so a fixed deploy can `resume` it.
                await self.gates.model_unavailable(record, message)
                retry += 1
        record.status = "completed"
        record.attempt = 1
        record.summary = f"{spec.model} ({spec.provider}), {len(spec.tools)} tools"
        return spec

    async def replan(self, seen_version: int, changed: str) -> None:
        """Adopt the worker's current tools after a change; once, however many calls noticed it.

        Only the tools: the run's prompt, model, limits, policy and settings stay its own.
        """
        s = self.s
        async with self._replanning:
            if self.spec.plan_version != seen_version:
                return
            version = seen_version + 1
            step_id = f"t{s.turn}.replan.{version}"
            build = await self.load_spec(step_id, self.spec.provider)
            before, s.spec = self.spec, adopt(self.spec, build, version)
            was = ReplacedPlan(turn=s.turn, plan_version=before.plan_version, tools=before.tools)
            s.replaced_plans = [*s.replaced_plans, was]  # a fork before it starts on these
            record = next(r for r in reversed(s.ledger) if r.step_id == step_id)
            what = adopted(before, s.spec) + forget_remembered(s, before)
            record.summary = f"plan v{version}, tools only: {what}; after {changed}"[:160]
            self.publish()

    def digest(self, value: object) -> str:
        """The input hash of a step, keyed with the run's secret salt."""
        salt = self.s.spec.hash_salt if self.s.spec is not None else ""
        return keyed_sha256_hex(salt, value)

    def append(self, message: Message) -> None:
        """Add a message to the transcript and extend its hash chain."""
        s = self.s
        s.messages.append(message)
        s.transcript_hash = sha256_hex(s.transcript_hash + canonical_json(message))


class OnSteps:
    """A part of the loop built on `Steps`: the run's state and gates at hand."""

    def __init__(self, steps: Steps) -> None:
        self.steps = steps
        self.s = steps.s
        self.gates = steps.gates
