"""Typed results: take the `final_answer` out of a reply, validate it, retry, park. Deterministic.

Only runs whose spec has an `output_schema` do anything here. A reply that
- calls `final_answer` alone: a worker with the agent validates it (`tN.tool.I.final_answer`,
  an activity on the agent's queue); valid ends the run, invalid goes back to the model as an
  error result;
- calls it beside other tools: those run, and `final_answer` is answered "call me alone";
- ends its turn in plain text: the model is asked to call `final_answer` (`tN.output.missing`).
Each miss counts; after `max_output_retries + 1` in a row the run parks in `output_invalid`, and
`resume` gives the model as many tries again. A worker that cannot validate parks it too.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from waypoint.protocol import (
        ContentBlock,
        ModelResponse,
        OutputCheck,
        OutputVerdict,
        RunResult,
        StepRecord,
        TextBlock,
        ToolResultBlock,
        ToolUseBlock,
    )
    from waypoint.protocol.output import FINAL_TOOL
    from waypoint.protocol.vocabulary import REFUSAL

from waypoint._workflows import cancel
from waypoint._workflows.steps import OnSteps, activity_id, failure


class OutputSteps(OnSteps):
    """Turns the model's `final_answer` calls into the run's validated, typed result."""

    @property
    def expected(self) -> bool:
        """Whether the run's agent has an `output_type`."""
        return self.steps.spec.output_schema is not None

    def text(self) -> str:
        """The validated answer as JSON text, for `RunResult.output`."""
        return json.dumps(self.s.output_json, ensure_ascii=False)

    async def review(
        self, calls: list[ToolUseBlock], cut_off: bool
    ) -> tuple[list[ToolUseBlock], list[ContentBlock]]:
        """The calls left to run, and what to tell the model about its final answer.

        Sets `s.output_json` when the answer fits; then nothing is left to run.
        """
        if not self.expected or (cut_off and calls):
            return calls, []  # a cut-off reply's calls are all refused, final_answer too
        final = [(i, c) for i, c in enumerate(calls, start=1) if c.name == FINAL_TOOL]
        others = [c for c in calls if c.name != FINAL_TOOL]
        name = self.steps.spec.output_name
        feedback: list[ContentBlock] = []
        if not calls:
            record = self._record(f"t{self.s.turn}.output.missing", {"missing": True})
            why = f"answered in text; asked to call {FINAL_TOOL}"
            self._finish(record, False, why)
            feedback.append(
                TextBlock(
                    text=f"Your final answer must be given by calling the {FINAL_TOOL} tool "
                    f"with a {name}, not as text. Call {FINAL_TOOL} now."
                )
            )
            problem = why
        elif not final:
            return calls, []
        elif others or len(final) > 1:
            problem = f"{FINAL_TOOL} called beside other tools; not checked"
            for i, call in final:
                self._finish(self._record_call(i, call), False, problem)
                feedback.append(
                    ToolResultBlock(
                        tool_use_id=call.id,
                        content=f"{FINAL_TOOL} was not checked: call it once and alone, after "
                        "the other tools have answered.",
                        is_error=True,
                    )
                )
        else:
            i, call = final[0]
            verdict = await self._check(i, call)
            if verdict.valid:
                self.s.output_json = verdict.value
                self.s.output_retries = 0
                return [], []
            problem = " ".join(verdict.errors.split())
            feedback.append(
                ToolResultBlock(
                    tool_use_id=call.id,
                    content=f"Your answer does not fit {name}:\n{verdict.errors}\n"
                    f"Call {FINAL_TOOL} again with a corrected answer.",
                    is_error=True,
                )
            )
        await self._count_miss(problem)
        return others, feedback

    async def _count_miss(self, problem: str) -> None:
        """Count a miss; past the budget, park until an operator says `resume`."""
        s, spec = self.s, self.steps.spec
        s.output_retries += 1
        if s.output_retries <= spec.max_output_retries:
            return
        tries = spec.max_output_retries + 1
        await self._park(
            f"the final answer did not fit {spec.output_name} in {s.output_retries} tries "
            f"(last: {problem}); `resume` gives the model {tries} more"
        )
        s.output_retries = 0

    async def _park(self, detail: str) -> None:
        s = self.s
        seen = s.resumes
        self.gates.set_state("output_invalid", detail[:300])
        self.gates.parked()
        await workflow.wait_condition(lambda: s.resumes > seen)
        self.gates.set_state("running")

    def finish(self, response: ModelResponse) -> RunResult:
        """End the run: `refused` if the model refused, else `done`; the stop is never masked."""
        s = self.s
        s.output = self._answer()
        if s.output_json is not None:
            s.output = self.text()
        if response.stop_reason == REFUSAL:
            s.stop_details = response.stop_details or "the model declined to continue"
            self.gates.set_state("refused", f"refusal: {s.stop_details}")
        else:  # a typed result ends on a `final_answer` call: its stop reason is tool_use
            how = "final answer" if s.output_json is not None else response.stop_reason
            self.gates.set_state("done", f"finished: {how}")
        return RunResult(
            agent=s.input.agent,
            output=s.output,
            stop_reason=response.stop_reason,
            stop_details=s.stop_details,
            state=s.state,
            turns=s.turn,
            total_tokens=s.total_tokens,
            cost_usd=s.cost_usd,
            cost_known=s.cost_known,
            ledger=s.ledger,
            output_json=s.output_json,
            steps_archived=s.archived.steps,
        )

    def _answer(self) -> str:
        """The text of the trailing assistant messages: a continued answer spans several."""
        parts: list[str] = []
        for message in reversed(self.s.messages):
            if message.role != "assistant":
                break
            parts.append(text_of_blocks(message.content))
        return "".join(reversed(parts))

    def _record(self, step_id: str, consumed: object) -> StepRecord:
        return self.steps.record(step_id, "tool", self.steps.digest(consumed), tool=FINAL_TOOL)

    def _record_call(self, index: int, call: ToolUseBlock) -> StepRecord:
        spec = self.steps.spec
        tool = next((t for t in spec.tools if t.name == FINAL_TOOL), None)
        consumed = {
            "tool": FINAL_TOOL,
            "schema": tool.schema_hash if tool else "",
            "arguments": call.input,
        }
        return self._record(f"t{self.s.turn}.tool.{index}.{FINAL_TOOL}", consumed)

    def _finish(self, record: StepRecord, valid: bool, summary: str) -> None:
        record.status = "completed" if valid else "error"
        record.summary = " ".join(summary.split())[:160]
        self.steps.publish()

    async def _check(self, index: int, call: ToolUseBlock) -> OutputVerdict:
        """Validate on the worker, as a recorded step; a worker that cannot, parks the run."""
        record = self._record_call(index, call)
        if call.invalid:
            verdict = OutputVerdict(valid=False, errors=f"- (answer): {call.invalid}")
            self._finish(record, False, verdict.errors)
            return verdict
        spec = self.steps.spec
        tool = next((t for t in spec.tools if t.name == FINAL_TOOL), None)
        check = OutputCheck(
            agent=spec.name,
            step_id=record.step_id,
            schema_hash=tool.schema_hash if tool else "",
            value=call.input,
        )
        retry = 0
        while True:
            options: dict[str, Any] = {
                "result_type": OutputVerdict,
                "activity_id": activity_id(record, retry),
                "start_to_close_timeout": timedelta(seconds=30),
                "heartbeat_timeout": self.s.input.options.tool_heartbeat_timeout,
                "retry_policy": self.steps.retry_policy(3),
                "summary": f"t{self.s.turn} check final answer",
            }
            queue = self.steps.agent_queue()
            try:
                verdict = await workflow.execute_activity(
                    "waypoint.validate_output", check, task_queue=queue, **options
                )
                break
            except (ActivityError, ApplicationError) as err:
                cancel.end_step(self.s, record, err)  # a cancel is not a failed check: it ends
                # A local activity's non-retryable failure arrives unwrapped (temporalio 1.35).
                message = failure(err)[1] if isinstance(err, ActivityError) else err.message
                record.summary = f"parked: {message}"[:160]
                await self._park(f"cannot check the final answer: {message}")
                retry += 1
        summary = f"valid {spec.output_name}" if verdict.valid else verdict.errors
        self._finish(record, verdict.valid, summary)
        return verdict


def text_of_blocks(content: list[ContentBlock]) -> str:
    """The text blocks of a reply, one per line."""
    return "\n".join(b.text for b in content if isinstance(b, TextBlock))
