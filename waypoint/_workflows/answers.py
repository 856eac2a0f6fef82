"""Where a run waits for a client to answer a tool call. Deterministic code only.

A tool with `runs_as="client"` has no worker body: once its call has passed the funnel
(arguments validated, approval if configured, step recorded), the run records a pending question
and waits, holding no process, for an `answer` Update (or signal when no worker is up) whose
result fits the tool's output schema. The schema is checked here, in pure Python
(`waypoint.protocol.answer_schema`), so an Update validator can refuse a wrong answer before it
reaches history. Reminders run the tool's `escalate_with` every `remind_every`; after `timeout`
the model is told nobody answered.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from waypoint.protocol import (
        AgentState,
        ClientAnswer,
        PendingQuestion,
        StepRecord,
        ToolResultBlock,
        ToolSpec,
        ToolUseBlock,
    )
    from waypoint.protocol.answer_schema import problems
    from waypoint.protocol.bounds import SizeLimits, why_unbounded

from waypoint._workflows import decisions
from waypoint._workflows.gates import Gates

Escalate = Callable[[int, float], Awaitable[None]]
Finish = Callable[..., ToolResultBlock]


def refusal(s: AgentState, answer: ClientAnswer) -> str:
    """Why this answer cannot apply (too big, unknown step, not waiting, wrong shape), or ''."""
    step_id = answer.step_id
    if decisions.seen(s, answer.decision_id):
        return ""  # a repeat: a recorded no-op
    bounds = (s.spec.bounds if s.spec else None) or SizeLimits()
    too_big = why_unbounded(answer.result, bounds, "the answer")
    if too_big:
        return too_big
    question = s.questions.get(step_id)
    if question is None or step_id in s.answers:
        waiting = ", ".join(q for q in s.questions if q not in s.answers) or "none"
        return _already(s, step_id) or (
            f"no question is waiting for an answer at {step_id} (waiting: {waiting})"
        )
    tool = next((t for t in s.spec.tools if t.name == question.tool), None) if s.spec else None
    schema = tool.output_schema if tool is not None else None
    if schema is None:
        return f"{question.tool} has no output schema in this run's spec: cannot check an answer"
    found = problems(schema, answer.result)
    if found:
        return f"the answer does not fit {question.tool}'s output: {'; '.join(found)}"
    return ""


def _already(s: AgentState, step_id: str) -> str:
    record = next((r for r in reversed(s.ledger) if r.step_id == step_id), None)
    answered = step_id in s.answers or (record is not None and record.status == "completed")
    if record is None or not record.decided_by or not answered:
        return ""
    return f"{step_id} was already answered by {record.decided_by} at {record.decided_at}"


class Answers:
    """Pending questions of client-answered tools, and the answers that end them."""

    def __init__(self, s: AgentState, gates: Gates) -> None:
        self.s = s
        self.gates = gates

    async def wait(
        self,
        record: StepRecord,
        call: ToolUseBlock,
        tool: ToolSpec,
        escalate: Escalate,
        finish: Finish,
    ) -> ToolResultBlock:
        """Ask, then wait for a fitting answer; the model reads it, or that nobody answered."""
        s, step_id = self.s, record.step_id
        if step_id not in s.questions and step_id not in s.answers:
            s.questions[step_id] = PendingQuestion(
                step_id=step_id,
                tool=call.name,
                arguments=call.input,
                asked_at=workflow.now().isoformat(),
                answer_schema=tool.output_schema,
            )
        record.status = "awaiting_answer"
        self.gates.settle()
        self.gates.notices.question(record, call, s.questions[step_id].asked_at)
        asked = datetime.fromisoformat(s.questions[step_id].asked_at)
        deadline = asked + tool.timeout if tool.timeout is not None else None
        note, answered = self.gates.handover.note(step_id, "answer"), lambda: step_id in s.answers
        while True:  # a handed-over wait keeps its deadline, next reminder and their count
            wait = self._next_wait(tool, deadline)
            if wait is not None and wait <= timedelta(0):
                break
            if await self.gates.handover.wait_for(answered, note, wait):
                break
            if deadline is not None and workflow.now() >= deadline:
                break
            await escalate(note.reminders, (workflow.now() - asked).total_seconds())
            note.reminders += 1
        s.questions.pop(step_id, None)
        self.gates.settle()  # the stream tells an answer by `answers`: settle, then pop
        answer = s.answers.pop(step_id, None)
        self.gates.notices.answered(record, answer)
        if answer is None:
            return finish(
                f"Nobody answered {call.name} within {tool.timeout}: there is no answer. "
                "Do not assume one; go on without it or say what is missing.",
                True,
            )
        block = finish(json.dumps(answer.result, ensure_ascii=False), False)
        record.summary = f"answered by {record.decided_by}: {record.summary}"[:160]
        return block

    def _next_wait(self, tool: ToolSpec, deadline: datetime | None) -> timedelta | None:
        """Until the next reminder or the deadline, whichever is first; None: for ever."""
        waits: list[timedelta] = []
        if tool.remind_every is not None and tool.escalate_with:
            waits.append(tool.remind_every)
        if deadline is not None:
            waits.append(deadline - workflow.now())
        return min(waits) if waits else None

    def receive(self, signal: str, answer: ClientAnswer) -> str:
        """Apply an answer, or record why it was refused; returns the refusal reason or ''."""
        if self.gates.repeated(signal, answer.step_id, answer):
            self.gates.publish()
            return ""
        why = refusal(self.s, answer)
        if why:
            self.gates.ignore(signal, answer.step_id, why)
            self.gates.publish()
            return why
        self.s.answers[answer.step_id] = answer
        decisions.stamp(self.s, answer.step_id, decisions.who(answer.sender, answer.identity))
        self.gates.applied(answer.decision_id, answer.step_id)
        return ""
