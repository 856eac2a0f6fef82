"""Model and tool steps: ids, input hashes, activity ids, effect keys. Deterministic code only.

Every step is an activity whose id is `"{step_id}#{input_hash[:12]}"`: Temporal compares activity
ids on replay, so a resume whose inputs changed fails with its non-determinism error instead of
silently reusing a stale result.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from waypoint.hashing import canonical_json, sha256_hex
    from waypoint.models import (
        AgentSpec,
        AgentState,
        Escalation,
        Limits,
        LoadSpecInput,
        Message,
        ModelRequest,
        ModelResponse,
        StepRecord,
        TextBlock,
        ToolCall,
        ToolOutcome,
        ToolPreparation,
        ToolResultBlock,
        ToolSpec,
        ToolUseBlock,
    )

from waypoint.workflows.gates import Gates

COMPACT_SYSTEM = (
    "You compact an agent's working memory. Summarise the conversation below for the agent "
    "that will continue it: the task, every fact it established (ids, numbers, names exactly), "
    "every action it took in the outside world and its result, and what remains to do. "
    "Do not call tools. Answer with the summary only."
)

# Error types raised by activities that the workflow handles rather than retries.
NEEDS_RECONCILIATION = "NeedsReconciliation"
TRANSCRIPT_MISSING = "TranscriptMissing"
TOOL_CHANGED = "ToolChanged"


def activity_id(record: StepRecord, retry: int = 0) -> str:
    """`{step_id}#{input_hash[:12]}`, with `~N` for the Nth operator-ordered retry."""
    base = f"{record.step_id}#{record.input_hash[:12]}"
    return f"{base}~{retry}" if retry else base


def render_transcript(messages: list[Message]) -> str:
    """The older transcript as plain text, so the summariser needs no tool definitions."""
    lines = []
    for message in messages:
        for block in message.content:
            if isinstance(block, TextBlock):
                lines.append(f"{message.role}: {block.text}")
            elif isinstance(block, ToolUseBlock):
                lines.append(f"tool call {block.name} {canonical_json(block.input)}")
            else:
                flag = " (error)" if block.is_error else ""
                lines.append(f"tool result{flag}: {block.content}")
    return "\n".join(lines)


def _failure(err: ActivityError) -> tuple[str, str]:
    """The error type and message an activity failed with."""
    cause = err.cause
    if isinstance(cause, ApplicationError):
        return cause.type or "", cause.message
    return "", str(cause or err)


class Steps:
    """Schedules the run's steps and records each in the ledger."""

    def __init__(self, s: AgentState, gates: Gates, publish: Callable[[], None]) -> None:
        self.s = s
        self.gates = gates
        self.publish = publish

    @property
    def spec(self) -> AgentSpec:
        """The spec in force (it changes only by a recorded replan)."""
        assert self.s.spec is not None
        return self.s.spec

    def record(
        self, step_id: str, kind: str, input_hash: str, tool: str | None = None
    ) -> StepRecord:
        """Add a step to the ledger before it is scheduled."""
        record = StepRecord(step_id=step_id, kind=kind, tool=tool, input_hash=input_hash)  # type: ignore[arg-type]
        self.s.ledger.append(record)
        return record

    def retry_policy(self, maximum_attempts: int) -> RetryPolicy:
        """The run's backoff with a step-specific attempt cap."""
        opts = self.s.input.options
        return RetryPolicy(
            initial_interval=opts.retry_initial_interval,
            maximum_interval=opts.retry_max_interval,
            maximum_attempts=maximum_attempts,
        )

    # --- spec -------------------------------------------------------------------------------

    async def load_spec(self, step_id: str, provider: str | None = None) -> AgentSpec:
        """Snapshot the agent's definition from the worker, as a recorded step."""
        s = self.s
        consumed = s.input.agent if provider is None else [s.input.agent, provider]
        record = self.record(step_id, "spec", sha256_hex(consumed))
        spec = await workflow.execute_activity(
            "waypoint.load_spec",
            LoadSpecInput(agent=s.input.agent, provider=provider),  # type: ignore[arg-type]
            result_type=AgentSpec,
            activity_id=activity_id(record),
            start_to_close_timeout=s.input.options.spec_timeout,
            retry_policy=self.retry_policy(5),
            summary=f"load spec {s.input.agent}",
        )
        record.status = "completed"
        record.attempt = 1
        record.summary = f"{spec.model} ({spec.provider}), {len(spec.tools)} tools"
        return spec

    async def replan(self, seen_version: int, changed: str) -> None:
        """Adopt the worker's current tools after a change; once, however many calls noticed it."""
        s = self.s
        if self.spec.plan_version != seen_version:
            return
        fresh = await self.load_spec(f"t{s.turn}.replan.{seen_version + 1}", self.spec.provider)
        s.spec = fresh.model_copy(update={"plan_version": seen_version + 1})
        s.ledger[-1].summary = f"plan v{seen_version + 1} after change: {changed}"[:160]
        self.publish()

    # --- model ------------------------------------------------------------------------------

    async def model(self) -> ModelResponse:
        """One model call over the whole transcript; its cost is added to the run's totals."""
        s, spec = self.s, self.spec
        step_id = f"t{s.turn}.model"
        input_hash = sha256_hex(
            {
                "model": spec.model,
                "system": sha256_hex(spec.system),
                "tools": [t.schema_hash for t in spec.tools],
                "transcript": s.transcript_hash,
            }
        )
        record = self.record(step_id, "model", input_hash)
        try:
            response = await self._call_model(record, s.stored_hash, s.stored_len)
        except ActivityError as err:
            if _failure(err)[0] != TRANSCRIPT_MISSING:
                raise
            workflow.logger.info("%s: worker lacks the stored transcript, resending it", step_id)
            response = await self._call_model(record, "", 0, retry=1)
        s.stored_hash, s.stored_len = s.transcript_hash, len(s.messages)
        tokens = response.usage.total
        calls = [b.name for b in response.content if isinstance(b, ToolUseBlock)]
        record.status = "completed"
        record.attempt = response.attempt
        record.tokens = tokens
        record.cost_usd = response.cost_usd
        record.summary = (
            f"{response.stop_reason}: {', '.join(calls)}" if calls else response.stop_reason
        )
        s.total_tokens += tokens
        if response.cost_usd is None:
            s.cost_known = False
        else:
            s.cost_usd += response.cost_usd
        self.publish()
        return response

    async def _call_model(
        self, record: StepRecord, prefix_hash: str, prefix_len: int, retry: int = 0
    ) -> ModelResponse:
        """One model call that sends only the messages the worker's store does not hold."""
        s, spec = self.s, self.spec
        opts, limits = s.input.options, s.limits or Limits()
        label = spec.model if spec.provider == "anthropic" else f"scripted ({spec.model})"
        return await workflow.execute_activity(
            "waypoint.call_model",
            ModelRequest(
                step_id=record.step_id,
                turn=s.turn,
                model=spec.model,
                provider=spec.provider,
                agent=spec.name,
                system=spec.system,
                tools=spec.tools,
                messages=s.messages[prefix_len:],
                max_tokens=limits.max_tokens_per_call,
                prefix_hash=prefix_hash,
                prefix_len=prefix_len,
            ),
            result_type=ModelResponse,
            activity_id=activity_id(record, retry),
            start_to_close_timeout=opts.model_timeout,
            heartbeat_timeout=opts.model_heartbeat_timeout,
            retry_policy=self.retry_policy(opts.model_max_attempts),
            summary=f"t{s.turn} model {label}",
        )

    # --- tools ------------------------------------------------------------------------------

    async def tool(self, index: int, call: ToolUseBlock) -> ToolResultBlock:
        """Run one tool call; whatever goes wrong goes back to the model as an error result."""
        s, spec = self.s, self.spec
        step_id = f"t{s.turn}.tool.{index}.{call.name}"
        tool = next((t for t in spec.tools if t.name == call.name), None)
        schema_hash = tool.schema_hash if tool else ""
        input_hash = sha256_hex({"tool": call.name, "schema": schema_hash, "arguments": call.input})
        record = self.record(step_id, "tool", input_hash, tool=call.name)

        def finish(content: str, is_error: bool, status: str = "") -> ToolResultBlock:
            record.status = status or ("error" if is_error else "completed")  # type: ignore[assignment]
            record.summary = " ".join(content.split())[:160]
            self.publish()
            return ToolResultBlock(tool_use_id=call.id, content=content, is_error=is_error)

        if tool is None:
            known = ", ".join(t.name for t in spec.tools)
            return finish(f"Unknown tool {call.name!r}. Available tools: {known}.", True)
        info = workflow.info()
        if tool.kind == "effect":
            record.effect_key = f"{info.workflow_id}/{info.first_execution_run_id}/{step_id}"
        tool_call = ToolCall(
            agent=spec.name,
            step_id=step_id,
            tool=call.name,
            schema_hash=tool.schema_hash,
            arguments=call.input,
            effect_key=record.effect_key,
            workflow_id=info.workflow_id,
            run_id=info.run_id,
        )
        try:
            if tool.approval != "never":
                prep = await workflow.execute_local_activity(
                    "waypoint.prepare_tool",
                    tool_call,
                    result_type=ToolPreparation,
                    start_to_close_timeout=timedelta(seconds=30),
                    retry_policy=self.retry_policy(3),
                    summary=f"t{s.turn} check {call.name}",
                )
                if not prep.valid:
                    return finish(prep.error, True)
                if prep.needs_approval:

                    async def escalate(reminder: int, waited: float) -> None:
                        await self.escalate(record, tool, call, reminder, waited)

                    outcome = await self.gates.approval(record, call, tool, escalate)
                    d = outcome.decision
                    if not outcome.approved:
                        why = f": {d.reason}" if d.reason else ""
                        return finish(
                            f"The call to {call.name} was rejected by {d.reviewer}{why}. "
                            "It was not executed.",
                            True,
                            "rejected",
                        )
                    record.status = "scheduled"
            return await self._run(tool, tool_call, record, finish)
        except ActivityError as err:
            kind, message = _failure(err)
            if kind != TOOL_CHANGED:
                return finish(f"Tool {call.name} failed: {message}", True)
            if spec.on_change == "refuse":
                raise ApplicationError(
                    f"step {step_id}: {message}. The agent's on_change policy is 'refuse'; "
                    "deploy a worker with the tool as the run began, or use on_change='replan'",
                    type=TOOL_CHANGED,
                    non_retryable=True,
                ) from err
            await self.replan(spec.plan_version, message)
            tools = ", ".join(t.name for t in self.spec.tools)
            return finish(
                f"Tool {call.name} was not run: {message}. The plan was updated to version "
                f"{self.spec.plan_version}; tools now available: {tools}.",
                True,
            )

    async def escalate(
        self, record: StepRecord, tool: ToolSpec, call: ToolUseBlock, reminder: int, waited: float
    ) -> None:
        """Run the tool's escalation effect as a step of its own; a failure never ends the wait."""
        spec, info = self.spec, workflow.info()
        notifier = next((t for t in spec.tools if t.name == tool.escalate_with), None)
        step_id = f"{record.step_id}.escalate.{reminder}"
        arguments = Escalation(
            step_id=record.step_id,
            tool=tool.name,
            arguments=call.input,
            waited_seconds=waited,
            reminder=reminder,
        ).model_dump(mode="json")
        input_hash = sha256_hex({"tool": tool.escalate_with, "arguments": arguments})
        note = self.record(step_id, "tool", input_hash, tool=tool.escalate_with)
        if notifier is None:
            note.status = "error"
            note.summary = f"escalation tool {tool.escalate_with!r} is not one of the agent's tools"
            return
        note.effect_key = f"{info.workflow_id}/{info.first_execution_run_id}/{step_id}"
        escalation = ToolCall(
            agent=spec.name,
            step_id=step_id,
            tool=notifier.name,
            schema_hash=notifier.schema_hash,
            arguments=arguments,
            effect_key=note.effect_key,
            workflow_id=info.workflow_id,
            run_id=info.run_id,
        )
        try:
            outcome = await self._execute(notifier, escalation, activity_id(note))
            note.status = "error" if outcome.is_error else "completed"
            note.summary = " ".join(outcome.content.split())[:160]
        except ActivityError as err:
            note.status = "error"
            note.summary = _failure(err)[1][:160]
        self.publish()

    # --- compaction -------------------------------------------------------------------------

    async def compact(self) -> None:
        """Fold all but the recent turns into a summary written by a recorded model step."""
        s, spec = self.s, self.spec
        keep = 2 * s.input.history.keep_recent_turns
        if len(s.messages) <= keep + 1:
            return
        older, recent = s.messages[:-keep], s.messages[-keep:]
        step_id = f"t{s.turn}.compact"
        record = self.record(
            step_id, "model", sha256_hex({"model": spec.model, "transcript": s.transcript_hash})
        )
        opts = s.input.options
        response = await workflow.execute_activity(
            "waypoint.call_model",
            ModelRequest(
                purpose="compact",
                step_id=step_id,
                turn=s.turn,
                model=spec.model,
                provider=spec.provider,
                agent=spec.name,
                system=COMPACT_SYSTEM,
                tools=[],
                messages=[Message(role="user", content=[TextBlock(text=render_transcript(older))])],
                max_tokens=(s.limits or Limits()).max_tokens_per_call,
            ),
            result_type=ModelResponse,
            activity_id=activity_id(record),
            start_to_close_timeout=opts.model_timeout,
            heartbeat_timeout=opts.model_heartbeat_timeout,
            retry_policy=self.retry_policy(opts.model_max_attempts),
            summary=f"t{s.turn} compact {len(older)} messages",
        )
        summary = "\n".join(b.text for b in response.content if isinstance(b, TextBlock))
        folded = s.turn - s.input.history.keep_recent_turns
        head = Message(
            role="user",
            content=[
                TextBlock(
                    text=f"{s.input.task}\n\n[Turns 1-{folded} so far, summarised by step "
                    f"{step_id}:]\n{summary}"
                )
            ],
        )
        s.messages = [head, *recent]
        s.transcript_hash = ""
        for message in s.messages:
            s.transcript_hash = sha256_hex(s.transcript_hash + canonical_json(message))
        s.compacted_turns = folded
        s.stored_hash, s.stored_len = "", 0
        record.status = "completed"
        record.attempt = response.attempt
        record.tokens = response.usage.total
        record.cost_usd = response.cost_usd
        record.summary = f"summarised turns 1-{folded}: {summary[:100]}"
        s.total_tokens += response.usage.total
        if response.cost_usd is None:
            s.cost_known = False
        else:
            s.cost_usd += response.cost_usd
        self.publish()

    async def _run(
        self,
        tool: ToolSpec,
        call: ToolCall,
        record: StepRecord,
        finish: Callable[..., ToolResultBlock],
    ) -> ToolResultBlock:
        """Execute; an effect nobody can confirm parks the run until an operator resolves it."""
        retry = 0
        while True:
            try:
                outcome = await self._execute(tool, call, activity_id(record, retry))
            except ActivityError as err:
                kind, message = _failure(err)
                if kind != NEEDS_RECONCILIATION:
                    raise
                decision = await self.gates.resolution(record, message)
                who = f"{decision.reviewer}" + (f" ({decision.reason})" if decision.reason else "")
                if decision.action == "result":
                    record.summary = f"resolved by {who}"
                    return finish(decision.result, False)
                if decision.action == "abort":
                    return finish(
                        f"An operator ({who}) abandoned this {tool.name} call after its outcome "
                        "could not be confirmed. Do not assume it happened.",
                        True,
                        "aborted",
                    )
                retry += 1
                call = call.model_copy(update={"reconcile_first": True})
                record.status = "scheduled"
                continue
            record.attempt = outcome.attempt
            record.reconciled = outcome.reconciled
            return finish(outcome.content, outcome.is_error)

    async def _execute(self, tool: ToolSpec, call: ToolCall, act_id: str) -> ToolOutcome:
        opts = self.s.input.options
        options: dict[str, Any] = {
            "result_type": ToolOutcome,
            "activity_id": act_id,
            "start_to_close_timeout": opts.tool_timeout,
            "retry_policy": self.retry_policy(opts.tool_max_attempts),
            "summary": f"t{self.s.turn} tool {tool.name}",
        }
        if tool.kind == "pure":
            return await workflow.execute_local_activity("waypoint.run_tool", call, **options)
        return await workflow.execute_activity("waypoint.run_tool", call, **options)
