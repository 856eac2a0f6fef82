"""`AgentWorkflow`: the agent loop as a deterministic Temporal workflow.

model step -> the tool calls it asked for (in parallel) -> tool results -> next model step,
until the model ends its turn. Every step is an activity whose id is
`"{step_id}#{input_hash[:12]}"`, so a resume whose inputs changed fails with Temporal's own
non-determinism error instead of reusing a stale result. No I/O, clock or randomness here.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from waypoint import search_attributes as sa
    from waypoint.hashing import canonical_json, sha256_hex
    from waypoint.models import (
        AgentSpec,
        AgentState,
        ApprovalDecision,
        ApprovalOutcome,
        IgnoredSignal,
        Limits,
        LoadSpecInput,
        Message,
        ModelRequest,
        ModelResponse,
        PendingApproval,
        RunInput,
        RunResult,
        RunStatus,
        StepRecord,
        TextBlock,
        ToolCall,
        ToolOutcome,
        ToolPreparation,
        ToolResultBlock,
        ToolSpec,
        ToolUseBlock,
    )
    from waypoint.workflows.details import render_details


@workflow.defn(name="AgentWorkflow")
class AgentWorkflow:
    """Runs one agent on one task; resumes from its history after any crash."""

    @workflow.init
    def __init__(self, input: RunInput) -> None:
        self.s = AgentState(input=input, limits=input.limits)
        self._published: tuple[object, ...] = ()

    # --- the loop ---------------------------------------------------------------------------

    @workflow.run
    async def run(self, input: RunInput) -> RunResult:
        """Load the spec, then alternate model and tool steps until the model is done."""
        s = self.s
        spec = await self._load_spec()
        if not s.messages:
            self._append(Message(role="user", content=[TextBlock(text=input.task)]))
        self._set_state("running")
        while True:
            await self._wait_within_limits(spec)
            s.turn += 1
            response = await self._model_step(spec)
            self._append(Message(role="assistant", content=response.content))
            calls = [b for b in response.content if isinstance(b, ToolUseBlock)]
            if not calls:
                s.output = "\n".join(b.text for b in response.content if isinstance(b, TextBlock))
                break
            results = await asyncio.gather(
                *(self._tool_step(spec, i, call) for i, call in enumerate(calls, start=1))
            )
            self._append(Message(role="user", content=list(results)))
        self._set_state("done", f"finished: {response.stop_reason}")
        return RunResult(
            agent=spec.name,
            output=s.output,
            stop_reason=response.stop_reason,
            turns=s.turn,
            total_tokens=s.total_tokens,
            cost_usd=s.cost_usd,
            cost_known=s.cost_known,
            ledger=s.ledger,
        )

    async def _load_spec(self) -> AgentSpec:
        """Snapshot the agent's definition once, at start; every resume replays the same spec."""
        s = self.s
        if s.spec is not None:
            return s.spec
        record = self._record("t0.spec", "spec", sha256_hex(s.input.agent))
        spec = await workflow.execute_activity(
            "waypoint.load_spec",
            LoadSpecInput(agent=s.input.agent),
            result_type=AgentSpec,
            activity_id=self._activity_id(record),
            start_to_close_timeout=s.input.options.spec_timeout,
            retry_policy=self._retry(5),
            summary=f"load spec {s.input.agent}",
        )
        record.status = "completed"
        record.attempt = 1
        record.summary = f"{spec.model} ({spec.provider}), {len(spec.tools)} tools"
        s.spec = spec
        if s.limits is None:
            s.limits = spec.limits
        return spec

    async def _model_step(self, spec: AgentSpec) -> ModelResponse:
        s = self.s
        step_id = f"t{s.turn}.model"
        input_hash = sha256_hex(
            {
                "model": spec.model,
                "system": sha256_hex(spec.system),
                "tools": [t.schema_hash for t in spec.tools],
                "transcript": s.transcript_hash,
            }
        )
        record = self._record(step_id, "model", input_hash)
        opts = s.input.options
        limits = self._limits()
        response = await workflow.execute_activity(
            "waypoint.call_model",
            ModelRequest(
                step_id=step_id,
                turn=s.turn,
                model=spec.model,
                provider=spec.provider,
                agent=spec.name,
                system=spec.system,
                tools=spec.tools,
                messages=s.messages,
                max_tokens=limits.max_tokens_per_call,
            ),
            result_type=ModelResponse,
            activity_id=self._activity_id(record),
            start_to_close_timeout=opts.model_timeout,
            heartbeat_timeout=opts.model_heartbeat_timeout,
            retry_policy=self._retry(opts.model_max_attempts),
            summary=f"t{s.turn} model {spec.model}",
        )
        tokens = response.usage.total
        record.status = "completed"
        record.attempt = response.attempt
        record.tokens = tokens
        record.cost_usd = response.cost_usd
        calls = [b.name for b in response.content if isinstance(b, ToolUseBlock)]
        record.summary = (
            f"{response.stop_reason}: {', '.join(calls)}" if calls else response.stop_reason
        )
        s.total_tokens += tokens
        if response.cost_usd is None:
            s.cost_known = False
        else:
            s.cost_usd += response.cost_usd
        self._publish()
        return response

    async def _tool_step(self, spec: AgentSpec, index: int, call: ToolUseBlock) -> ToolResultBlock:
        """Run one tool call; whatever goes wrong goes back to the model as an error result."""
        s = self.s
        step_id = f"t{s.turn}.tool.{index}.{call.name}"
        tool = next((t for t in spec.tools if t.name == call.name), None)
        schema_hash = tool.schema_hash if tool else ""
        input_hash = sha256_hex({"tool": call.name, "schema": schema_hash, "arguments": call.input})
        record = self._record(step_id, "tool", input_hash, tool=call.name)

        def finish(content: str, is_error: bool, status: str = "completed") -> ToolResultBlock:
            record.status = "error" if is_error and status == "completed" else status  # type: ignore[assignment]
            record.summary = " ".join(content.split())[:160]
            self._publish()
            return ToolResultBlock(tool_use_id=call.id, content=content, is_error=is_error)

        if tool is None:
            known = ", ".join(t.name for t in spec.tools)
            return finish(f"Unknown tool {call.name!r}. Available tools: {known}.", True)
        info = workflow.info()
        effect_key = None
        if tool.kind == "effect":
            effect_key = f"{info.workflow_id}/{info.first_execution_run_id}/{step_id}"
            record.effect_key = effect_key
        tool_call = ToolCall(
            agent=spec.name,
            step_id=step_id,
            tool=call.name,
            schema_hash=tool.schema_hash,
            arguments=call.input,
            effect_key=effect_key,
            workflow_id=info.workflow_id,
            run_id=info.run_id,
        )
        if tool.approval != "never":
            prep = await workflow.execute_local_activity(
                "waypoint.prepare_tool",
                tool_call,
                result_type=ToolPreparation,
                start_to_close_timeout=timedelta(seconds=30),
                retry_policy=self._retry(3),
                summary=f"t{s.turn} check {call.name}",
            )
            if not prep.valid:
                return finish(prep.error, True)
            if prep.needs_approval:
                outcome = await self._await_approval(record, tool, call)
                d = outcome.decision
                if not outcome.approved:
                    reason = f": {d.reason}" if d.reason else ""
                    return finish(
                        f"The call to {call.name} was rejected by {d.reviewer}{reason}. "
                        "It was not executed.",
                        True,
                        "rejected",
                    )
                record.summary = f"approved by {d.reviewer}"
                record.status = "scheduled"
        try:
            outcome = await self._execute_tool(tool, tool_call, record)
        except ActivityError as err:
            cause = err.cause
            message = cause.message if isinstance(cause, ApplicationError) else str(cause or err)
            return finish(f"Tool {call.name} failed: {message}", True)
        record.attempt = outcome.attempt
        return finish(outcome.content, outcome.is_error)

    async def _execute_tool(
        self, tool: ToolSpec, call: ToolCall, record: StepRecord
    ) -> ToolOutcome:
        opts = self.s.input.options
        common = {
            "result_type": ToolOutcome,
            "activity_id": self._activity_id(record),
            "start_to_close_timeout": opts.tool_timeout,
            "retry_policy": self._retry(opts.tool_max_attempts),
            "summary": f"t{self.s.turn} tool {tool.name}",
        }
        if tool.kind == "pure":
            return await workflow.execute_local_activity("waypoint.run_tool", call, **common)
        return await workflow.execute_activity("waypoint.run_tool", call, **common)

    # --- approvals --------------------------------------------------------------------------

    async def _await_approval(
        self, record: StepRecord, tool: ToolSpec, call: ToolUseBlock
    ) -> ApprovalOutcome:
        s = self.s
        step_id = record.step_id
        if step_id not in s.decisions:
            s.pending[step_id] = PendingApproval(
                step_id=step_id,
                tool=tool.name,
                arguments=call.input,
                arguments_hash=sha256_hex(call.input),
                requested_at=workflow.now().isoformat(),
            )
            record.status = "awaiting_approval"
            self._set_state("awaiting_approval")
            await workflow.wait_condition(lambda: step_id in s.decisions)
        outcome = s.decisions.pop(step_id)
        s.pending.pop(step_id, None)
        if not s.pending:
            self._set_state("running")
        else:
            self._publish()
        return outcome

    @workflow.signal(name="approve")
    def approve(self, decision: ApprovalDecision) -> None:
        """Approve the pending tool call named by `decision.step_id`."""
        self._decide("approve", decision, approved=True)

    @workflow.signal(name="reject")
    def reject(self, decision: ApprovalDecision) -> None:
        """Reject the pending tool call; the model is told who rejected it and why."""
        self._decide("reject", decision, approved=False)

    def _decide(self, signal: str, decision: ApprovalDecision, *, approved: bool) -> None:
        s = self.s
        pending = s.pending.get(decision.step_id)
        reason = ""
        if pending is None or decision.step_id in s.decisions:
            waiting = ", ".join(s.pending) or "none"
            reason = f"no approval is pending for this step (pending: {waiting})"
        elif decision.arguments_hash and decision.arguments_hash != pending.arguments_hash:
            reason = "the arguments reviewed are not the ones pending (stale approval)"
        if reason:
            workflow.logger.warning("ignored %s for %s: %s", signal, decision.step_id, reason)
            s.ignored_signals.append(
                IgnoredSignal(signal=signal, step_id=decision.step_id, reason=reason)
            )
            return
        s.decisions[decision.step_id] = ApprovalOutcome(approved=approved, decision=decision)

    # --- limits -----------------------------------------------------------------------------

    def _limits(self) -> Limits:
        return self.s.limits or Limits()

    def _limit_hit(self) -> str:
        s, limits = self.s, self._limits()
        if s.turn >= limits.max_turns:
            return f"max_turns={limits.max_turns} reached"
        if limits.max_total_tokens is not None and s.total_tokens >= limits.max_total_tokens:
            return f"max_total_tokens={limits.max_total_tokens} reached"
        if limits.max_cost_usd is not None and s.cost_usd >= limits.max_cost_usd:
            return f"max_cost_usd={limits.max_cost_usd} reached"
        return ""

    async def _wait_within_limits(self, spec: AgentSpec) -> None:
        """Park, not fail, at a limit: `raise_limits` continues exactly here."""
        hit = self._limit_hit()
        if hit:
            self._set_state("limit_reached", hit)
            await workflow.wait_condition(lambda: not self._limit_hit())
            self._set_state("running")

    @workflow.signal(name="raise_limits")
    def raise_limits(self, limits: Limits) -> None:
        """Replace the run's limits, e.g. to let a parked run continue."""
        self.s.limits = limits

    # --- queries ----------------------------------------------------------------------------

    @workflow.query(name="status")
    def status(self) -> RunStatus:
        """The run at a glance."""
        s = self.s
        return RunStatus(
            agent=s.input.agent,
            state=s.state,
            turn=s.turn,
            model=s.spec.model if s.spec else "",
            provider=s.spec.provider if s.spec else "",
            pending_approvals=list(s.pending.values()),
            ignored_signals=s.ignored_signals,
            total_tokens=s.total_tokens,
            cost_usd=s.cost_usd,
            cost_known=s.cost_known,
            detail=s.detail,
        )

    @workflow.query(name="ledger")
    def ledger(self) -> list[StepRecord]:
        """Every step so far, in order."""
        return self.s.ledger

    @workflow.query(name="limits")
    def limits(self) -> Limits:
        """The limits in force, so an operator can raise one and keep the others."""
        return self._limits()

    @workflow.query(name="pending_approvals")
    def pending_approvals(self) -> list[PendingApproval]:
        """Tool calls waiting for a person."""
        return list(self.s.pending.values())

    # --- bookkeeping ------------------------------------------------------------------------

    def _append(self, message: Message) -> None:
        s = self.s
        s.messages.append(message)
        s.transcript_hash = sha256_hex(s.transcript_hash + canonical_json(message))

    def _record(
        self, step_id: str, kind: str, input_hash: str, tool: str | None = None
    ) -> StepRecord:
        record = StepRecord(step_id=step_id, kind=kind, tool=tool, input_hash=input_hash)  # type: ignore[arg-type]
        self.s.ledger.append(record)
        return record

    @staticmethod
    def _activity_id(record: StepRecord) -> str:
        return f"{record.step_id}#{record.input_hash[:12]}"

    def _retry(self, maximum_attempts: int) -> RetryPolicy:
        opts = self.s.input.options
        return RetryPolicy(
            initial_interval=opts.retry_initial_interval,
            maximum_interval=opts.retry_max_interval,
            maximum_attempts=maximum_attempts,
        )

    def _set_state(self, state: str, detail: str = "") -> None:
        self.s.state = state  # type: ignore[assignment]
        self.s.detail = detail
        self._publish()

    def _publish(self) -> None:
        """Mirror the run's state into search attributes and the UI's current details."""
        s = self.s
        snapshot = (s.state, len(s.pending), s.turn, round(s.cost_usd, 6))
        if snapshot != self._published:
            self._published = snapshot
            workflow.upsert_search_attributes(
                [
                    sa.STATUS.value_set(s.state),
                    sa.PENDING_APPROVALS.value_set(len(s.pending)),
                    sa.TURNS.value_set(s.turn),
                    sa.COST_USD.value_set(s.cost_usd),
                ]
            )
        workflow.set_current_details(render_details(s, workflow.info().workflow_id))
