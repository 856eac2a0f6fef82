"""Tool steps: validation, approval, execution, reconciliation and escalation. Deterministic code.

A tool step's activity id is `"{step_id}#{input_hash[:12]}"` like every step's; an effect's
`effect_key` is `"{workflow_id}/{first_execution_run_id}/{step_id}"`, the same on every attempt,
resume and continue-as-new.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import timedelta
from functools import partial
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from waypoint.protocol import (
        Escalation,
        RichBlock,
        StepRecord,
        ToolCall,
        ToolOutcome,
        ToolPreparation,
        ToolResultBlock,
        ToolSpec,
        ToolUseBlock,
        text_of,
    )
    from waypoint.protocol.handover import OpenWait
    from waypoint.protocol.vocabulary import EFFECT_NOT_APPLIED, NEEDS_RECONCILIATION, TOOL_CHANGED

from waypoint._workflows import cancel, children, policy
from waypoint._workflows.answers import Answers
from waypoint._workflows.freshness import Freshness
from waypoint._workflows.steps import (
    Finish,
    OnSteps,
    StepFailure,
    Steps,
    activity_id,
    failure,
)
from waypoint._workflows.tool_gate import Judged, ToolGate
from waypoint._workflows.turns import LocalTurn


class ToolSteps(OnSteps):
    """Runs the tool calls of a model reply; every outcome goes back to the model."""

    def __init__(self, steps: Steps) -> None:
        super().__init__(steps)
        self.publish = steps.publish
        self.answers = Answers(self.s, self.gates)
        self.children = children.ChildSteps(steps)
        self.freshness = Freshness(self)
        self.turns = LocalTurn(self)
        self.gate = ToolGate(self)

    def _call(
        self, step_id: str, tool: ToolSpec, arguments: dict[str, Any], effect_key: str | None
    ) -> ToolCall:
        info = workflow.info()
        return ToolCall(
            agent=self.steps.spec.name,
            step_id=step_id,
            tool=tool.name,
            schema_hash=tool.schema_hash,
            arguments=arguments,
            effect_key=effect_key,
            workflow_id=info.workflow_id,
            run_id=info.run_id,
            fresh=tool.fresh_for is not None,
        )

    def _effect_key(self, step_id: str) -> str:
        return children.effect_key(self.s.input, step_id)

    async def reply(self, calls: list[ToolUseBlock], cut_off: bool) -> list[ToolResultBlock]:
        """Run a reply's tool calls, at most `max_parallel_tools` at once.

        A reply cut off at `max_tokens` runs none of them: each is answered with an error
        saying so, since the last call's arguments are incomplete and the rest may depend on it.
        """
        numbered = list(enumerate(calls, start=1))
        if not self.gates.handover.changed_tool_parked():  # else back to the park first
            await self.gates.before_step(OpenWait(kind="paused"))  # no call starts while paused
        if cut_off:
            reason = (
                "cut off at max_tokens even with the model's full output budget; nothing in "
                "that reply was run. Split the work into smaller calls"
            )
            return [self.refuse(i, call, reason) for i, call in numbered]
        if self.turns.fits(calls):  # durability="turn": one local turn, saved together
            return await self.turns.run(numbered)
        cap = self.steps.spec.settings.max_parallel_tools
        if cap is None or cap >= len(calls):
            return list(await asyncio.gather(*(self._tracked(i, call) for i, call in numbered)))
        slots = asyncio.Semaphore(cap)

        async def bounded(i: int, call: ToolUseBlock) -> ToolResultBlock:
            async with slots:
                return await self._tracked(i, call)

        return list(await asyncio.gather(*(bounded(i, call) for i, call in numbered)))

    def _tracked(self, index: int, call: ToolUseBlock) -> Awaitable[ToolResultBlock]:
        """The call, watched for a handover (`handover.py`): answered from it if it finished."""
        return self.gates.handover.call(index, self.tool(index, call))

    def _record(self, index: int, call: ToolUseBlock) -> tuple[StepRecord, ToolSpec | None]:
        spec = self.steps.spec
        step_id = f"t{self.s.turn}.tool.{index}.{call.name}"
        tool = next((t for t in spec.tools if t.name == call.name), None)
        schema_hash = tool.schema_hash if tool else ""
        input_hash = self.steps.digest(
            {"tool": call.name, "schema": schema_hash, "arguments": call.input}
        )
        carried = self.gates.handover.carried_record(step_id)  # it waited at a handover
        return carried or self.steps.record(step_id, "tool", input_hash, tool=call.name), tool

    def refuse(self, index: int, call: ToolUseBlock, reason: str) -> ToolResultBlock:
        """Answer a call that must not run with an error result, recorded in the ledger."""
        record, _ = self._record(index, call)
        record.status = "error"
        record.summary = f"not run: {reason}"[:160]
        self.publish()
        content = f"The call to {call.name} was not run: {reason}."
        return ToolResultBlock(tool_use_id=call.id, content=content, is_error=True)

    def finisher(self, record: StepRecord, call: ToolUseBlock) -> Finish:
        """What answers `call` however its step ends: its ledger line, shown, and the result."""

        def finish(
            content: str | list[RichBlock], is_error: bool, status: str = "", said: str = ""
        ) -> ToolResultBlock:
            """Answer the call; `said` goes in front of the ledger line's summary."""
            record.status = status or ("error" if is_error else "completed")  # type: ignore[assignment]
            record.summary = (said + " ".join(text_of(content).split()))[:160]
            self.publish()
            return ToolResultBlock(tool_use_id=call.id, content=content, is_error=is_error)

        return finish

    async def tool(self, index: int, call: ToolUseBlock) -> ToolResultBlock:
        """Run one tool call; whatever goes wrong goes back to the model as an error result."""
        if call.invalid:
            return self.refuse(index, call, call.invalid)
        spec = self.steps.spec
        record, tool = self._record(index, call)
        step_id = record.step_id
        finish = self.finisher(record, call)
        if tool is None:
            known = ", ".join(t.name for t in spec.tools)
            return finish(f"Unknown tool {call.name!r}. Available tools: {known}.", True)
        if tool.kind == "effect":
            record.effect_key = self._effect_key(step_id)
        tool_call = self._call(step_id, tool, call.input, record.effect_key)
        # A step parked in `tool_changed` and resumed after a rollback runs again from here.
        changed, judged = 0, self.gates.handover.judged(step_id, Judged())
        held = OpenWait(kind="held", step_id=step_id)  # a pause may hand the call over
        parked, unclear = self.gates.handover.parked(step_id), ""  # parked at a handover
        if parked is not None and parked.kind == "tool_changed":  # parked there again
            line = self.s.tool_changed.get(step_id, "").removeprefix(f"step {step_id}: ")
            if (answered := await self.changed_tool(record, line, finish, None)) is not None:
                return answered
            changed = 1
        elif parked is not None:  # waits for an operator again: the effect is not run again
            u = self.s.unresolved.get(step_id)
            unclear = u.reason if u is not None else "not confirmed before the handover"
        while True:
            try:
                if not unclear:
                    await self.gates.before_step(self.gates.handover.note(step_id, "held"))
                prep: ToolPreparation | None = self.gates.handover.prepared(step_id)
                if prep is None and self._checks_first(tool) and not unclear:  # judged first
                    prep = await self._prepare(tool_call, call.name)
                judged.prep = prep
                if prep is not None:
                    if not prep.valid:
                        return finish(prep.error, True)
                    if prep.arguments is not None:
                        call = call.model_copy(update={"input": prep.arguments})
                        tool_call = tool_call.model_copy(update={"arguments": prep.arguments})
                try:
                    refused = (
                        None
                        if unclear
                        else await self.gate.judge(
                            record, tool, call, tool_call, prep, judged, finish
                        )
                    )
                except BaseException as err:  # cancelled, or parked: the approval hears it
                    self.gate.decided(record, judged.approved, "", err)
                    raise
                if refused is not None:
                    return refused
                if tool.runs_as == "client":  # no worker body: a client answers (answers.py)
                    remind = partial(self.escalate, record, tool, call)
                    run = partial(self.answers.wait, record, call, tool, remind, finish)
                elif tool.runs_as == "child":  # sub-agent: past the same gate, a child workflow
                    run = partial(self._child, tool, tool_call, record, finish)
                else:
                    run = partial(self._run, tool, tool_call, record, finish, changed, unclear)
                if not unclear:
                    await self.gates.before_step(held)  # approved while paused: once unpaused
                unclear = ""
                block = await run()
                await self.freshness.observed(tool, tool_call, block)
                return block
            except StepFailure as err:
                kind, message = failure(err)
                if kind != TOOL_CHANGED:
                    return finish(f"Tool {call.name} failed: {message}", True)
                if (answered := await self.changed_tool(record, message, finish, err)) is not None:
                    return answered
                changed += 1  # rolled back, says the operator: run the step again

    async def changed_tool(
        self, record: StepRecord, message: str, finish: Finish, err: Any
    ) -> ToolResultBlock | None:
        """A tool changed under the run: park it (`refuse`) or replan; None: run it again."""
        spec = self.steps.spec
        if spec.on_change == "refuse":
            if not await self.gates.tool_changed(record, message):
                record.status = "scheduled"
                return None
        await self.steps.replan(spec.plan_version, message)
        tools = ", ".join(t.name for t in self.steps.spec.tools)
        return finish(
            f"Tool {record.tool} was not run: {message}. The plan was updated to version "
            f"{self.steps.spec.plan_version}; tools now available: {tools}.",
            True,
        )

    def _checks_first(self, tool: ToolSpec) -> bool:
        """Whether arguments are validated first: only where something judges them."""
        return (
            policy.current(self.s) is not None
            or bool(self.s.policy.remembered)
            or tool.approval != "never"
            or tool.runs_as != "activity"
        )

    async def _prepare(self, call: ToolCall, name: str) -> ToolPreparation:
        """Validate the arguments and ask the tool's approval rule, on the worker.

        A regular activity on the agent's queue: temporalio 1.35's core failed a run's workflow
        task for good ("LA marker handling in invalid state") when a local one ran under a short
        task timeout on a loaded machine. A kill before it reaches the attempt journal (torture
        seed 576: the worker died of the tool beside it) costs its heartbeat timeout.
        """
        return await workflow.execute_activity(
            "waypoint.prepare_tool",
            call,
            result_type=ToolPreparation,
            task_queue=self.steps.agent_queue(),
            start_to_close_timeout=timedelta(seconds=30),
            heartbeat_timeout=self.s.input.options.tool_heartbeat_timeout,  # see StepOptions
            retry_policy=self.steps.retry_policy(3),
            summary=f"t{self.s.turn} check {name}",
        )

    async def escalate(
        self, record: StepRecord, tool: ToolSpec, call: ToolUseBlock, reminder: int, waited: float
    ) -> None:
        """Run the tool's escalation effect as a step of its own; a failure never ends the wait."""
        spec = self.steps.spec
        notifier = next((t for t in spec.tools if t.name == tool.escalate_with), None)
        step_id = f"{record.step_id}.escalate.{reminder}"
        arguments = Escalation(
            step_id=record.step_id,
            tool=tool.name,
            arguments=call.input,
            waited_seconds=waited,
            reminder=reminder,
        ).model_dump(mode="json")
        input_hash = self.steps.digest({"tool": tool.escalate_with, "arguments": arguments})
        note = self.steps.record(step_id, "tool", input_hash, tool=tool.escalate_with)
        if notifier is None:
            note.status = "error"
            note.summary = f"escalation tool {tool.escalate_with!r} is not one of the agent's tools"
            return
        note.effect_key = self._effect_key(step_id)
        escalation = self._call(step_id, notifier, arguments, note.effect_key)
        try:
            outcome = await self._execute(notifier, escalation, activity_id(note))
            note.status = "error" if outcome.is_error else "completed"
            note.summary = " ".join(text_of(outcome.content).split())[:160]
        except StepFailure as err:
            note.status = "error"
            note.summary = failure(err)[1][:160]
        self.publish()

    async def _child(
        self, tool: ToolSpec, call: ToolCall, record: StepRecord, finish: Callable[..., Any]
    ) -> ToolResultBlock:
        outcome = await self.children.run(tool, call, record)
        return finish(outcome.content, outcome.is_error)

    async def _run(
        self,
        tool: ToolSpec,
        call: ToolCall,
        record: StepRecord,
        finish: Finish,
        changed: int = 0,
        unclear: str = "",
    ) -> ToolResultBlock:
        """Execute; an effect nobody can confirm parks the run until an operator resolves it.

        `changed`: how often the step ran again after its tool changed (fresh activity ids).
        `unclear`: why it waited for an operator at a handover; it waits again, not run again.
        """
        retry = 0
        while True:
            if unclear:
                message, unclear = unclear, ""
            else:
                try:
                    outcome = await self._execute(tool, call, activity_id(record, retry, changed))
                except StepFailure as err:
                    kind, message = failure(err)
                    if kind == EFFECT_NOT_APPLIED:
                        return finish(f"Tool {tool.name} failed; nothing happened: {message}", True)
                    if kind == TOOL_CHANGED or tool.kind != "effect":
                        raise
                    if kind != NEEDS_RECONCILIATION:
                        if not call.reconcile_only:
                            # Any try may have reached downstream: ask once more, never guess.
                            call = call.model_copy(update={"reconcile_only": True})
                            retry += 1
                            continue
                        message = f"{tool.name} failed on every try and the last lookup failed too"
                else:
                    record.attempt = outcome.attempt
                    record.reconciled = outcome.reconciled
                    return finish(outcome.content, outcome.is_error)
            decision = await self.gates.resolution(record, message)
            ask = partial(self.gates.resolution, record)
            decision = await self.freshness.before_retry(tool, decision, ask)
            who = f"{decision.reviewer}" + (f" ({decision.reason})" if decision.reason else "")
            if decision.action == "result":
                block = finish(decision.result, False)
                record.summary = f"resolved by {who}: {record.summary}"[:160]
                return block
            if decision.action == "abort":
                return finish(
                    f"An operator ({who}) abandoned this {tool.name} call after its outcome "
                    "could not be confirmed. Do not assume it happened.",
                    True,
                    "aborted",
                )
            retry += 1
            call = call.model_copy(update={"reconcile_first": True, "reconcile_only": False})
            record.status = "scheduled"

    async def _execute(self, tool: ToolSpec, call: ToolCall, act_id: str) -> ToolOutcome:
        opts = self.s.input.options
        timeout = tool.timeout or opts.tool_timeout
        if tool.kind == "effect" and call.effect_key is not None:
            # The worker keeps the timeout and outwaits a thread the tool left running; the
            # server's limit only covers a worker that hangs while heartbeating.
            call = call.model_copy(update={"timeout": timeout})
            timeout += opts.effect_overrun
        options: dict[str, Any] = {
            "result_type": ToolOutcome,
            "activity_id": act_id,
            "start_to_close_timeout": timeout,
            "retry_policy": self.steps.retry_policy(tool.max_attempts or opts.tool_max_attempts),
            "summary": f"t{self.s.turn} tool {tool.name}",
        }
        queue = self.steps.agent_queue()
        if call.reconcile_only:
            options["retry_policy"] = self.steps.retry_policy(1)
            options["summary"] = f"t{self.s.turn} reconcile {tool.name}"
        if tool.kind == "effect":
            # A cancelled run learns what its effect did (result, or stopped and reconciled)
            # instead of ending while the effect may still be running, also a result that
            # comes with the cancel.
            options["cancellation_type"] = (
                workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED
            )
            return await cancel.execute(
                "waypoint.run_tool",
                call,
                task_queue=queue,
                heartbeat_timeout=opts.tool_heartbeat_timeout,
                **options,
            )
        outcome: ToolOutcome = await workflow.execute_activity(
            "waypoint.run_tool",
            call,
            task_queue=queue,
            heartbeat_timeout=opts.tool_heartbeat_timeout,
            **options,
        )
        self.freshness.ran(call.step_id, outcome)  # a read's own stamps: when, and what counts
        return outcome
