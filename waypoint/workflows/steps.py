"""Model and tool steps: ids, input hashes, activity ids, effect keys. Deterministic code only.

Every step is an activity whose id is `"{step_id}#{input_hash[:12]}"`: Temporal compares activity
ids on replay, so a resume whose inputs changed fails with its non-determinism error instead of
silently reusing a stale result.
"""

from __future__ import annotations

from collections.abc import Callable

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from waypoint.hashing import canonical_json, sha256_hex
    from waypoint.models import (
        AgentSpec,
        AgentState,
        Limits,
        LoadSpecInput,
        Message,
        ModelRequest,
        ModelResponse,
        StepRecord,
        TextBlock,
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


def failure(err: ActivityError) -> tuple[str, str]:
    """The error type and message an activity failed with."""
    cause = err.cause
    if isinstance(cause, ApplicationError):
        return cause.type or "", cause.message
    return "", str(cause or err)


class Steps:
    """Schedules spec and model steps, keeps the ledger; tool steps build on it (`tool_steps`)."""

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
            if failure(err)[0] != TRANSCRIPT_MISSING:
                raise
            workflow.logger.info("%s: worker lacks the stored transcript, resending it", step_id)
            response = await self._call_model(record, "", 0, retry=1)
        s.stored_hash, s.stored_len = s.transcript_hash, len(s.messages)
        calls = [b.name for b in response.content if isinstance(b, ToolUseBlock)]
        stop = response.stop_reason
        self._account(record, response, f"{stop}: {', '.join(calls)}" if calls else stop)
        return response

    async def _call_model(
        self, record: StepRecord, prefix_hash: str, prefix_len: int, retry: int = 0
    ) -> ModelResponse:
        """One model call that sends only the messages the worker's store does not hold."""
        s, spec = self.s, self.spec
        label = spec.model if spec.provider == "anthropic" else f"scripted ({spec.model})"
        request = self._request(record, spec.system, spec.tools, s.messages[prefix_len:])
        request = request.model_copy(update={"prefix_hash": prefix_hash, "prefix_len": prefix_len})
        return await self._call(request, record, retry, f"t{s.turn} model {label}")

    def _request(
        self, record: StepRecord, system: str, tools: list[ToolSpec], messages: list[Message]
    ) -> ModelRequest:
        s, spec = self.s, self.spec
        return ModelRequest(
            step_id=record.step_id,
            turn=s.turn,
            model=spec.model,
            provider=spec.provider,
            agent=spec.name,
            system=system,
            tools=tools,
            messages=messages,
            max_tokens=(s.limits or Limits()).max_tokens_per_call,
        )

    async def _call(
        self, request: ModelRequest, record: StepRecord, retry: int, summary: str
    ) -> ModelResponse:
        opts = self.s.input.options
        return await workflow.execute_activity(
            "waypoint.call_model",
            request,
            result_type=ModelResponse,
            activity_id=activity_id(record, retry),
            start_to_close_timeout=opts.model_timeout,
            heartbeat_timeout=opts.model_heartbeat_timeout,
            retry_policy=self.retry_policy(opts.model_max_attempts),
            summary=summary,
        )

    def _account(self, record: StepRecord, response: ModelResponse, summary: str) -> None:
        """Record a finished model step and add what it cost to the run's totals."""
        s = self.s
        record.status = "completed"
        record.attempt = response.attempt
        record.tokens = response.usage.total
        record.cost_usd = response.cost_usd
        record.summary = summary
        s.total_tokens += response.usage.total
        if response.cost_usd is None:
            s.cost_known = False
        else:
            s.cost_usd += response.cost_usd
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
        digest = Message(role="user", content=[TextBlock(text=render_transcript(older))])
        request = self._request(record, COMPACT_SYSTEM, [], [digest])
        request = request.model_copy(update={"purpose": "compact"})
        summary_line = f"t{s.turn} compact {len(older)} messages"
        response = await self._call(request, record, 0, summary_line)
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
        self._account(record, response, f"summarised turns 1-{folded}: {summary[:100]}")
