"""The tool funnel's gate: the policy, a person, fresh reads, judged last. Deterministic code.

Between a decision and the call it allows, things move: a `policy set`, a refresh of the reads
the call relied on, a raised limit. The gate judges the call again after its last wait, in the
workflow task that then schedules it, with nothing awaited in between, and tells a waiting
approval which way it went (`Gates.fate`): the person who approved hears whether it ran.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from waypoint.protocol import (
        APPROVED_NOT_RUN,
        Receipt,
        StepRecord,
        ToolCall,
        ToolPreparation,
        ToolResultBlock,
        ToolSpec,
        ToolUseBlock,
        text_of,
    )

from waypoint._workflows import policy, simple

if TYPE_CHECKING:
    from waypoint._workflows.freshness import Freshness
    from waypoint._workflows.gates import Gates
    from waypoint._workflows.steps import Finish
    from waypoint.protocol import AgentState


class GateTools(Protocol):
    """What the gate needs of `ToolSteps` (which builds it)."""

    s: AgentState
    gates: Gates
    freshness: Freshness

    def publish(self) -> None: ...  # noqa: D102

    async def _prepare(self, call: ToolCall, name: str) -> ToolPreparation: ...  # noqa: D102

    def escalate(  # noqa: D102
        self, record: StepRecord, tool: ToolSpec, call: ToolUseBlock, reminder: int, waited: float
    ) -> Awaitable[None]: ...


@dataclass
class Judged:
    """What the gate decided for a step so far: kept when the step runs again after a park."""

    route: str | None = None
    approved: bool = False
    """A person approved this call (not a remembered approval): not asked again."""
    prep: ToolPreparation | None = None
    """The arguments as checked, carried if the call is held or unclear at a handover."""


class ToolGate:
    """Decides whether a tool call may run, last, and says so to whoever approved it."""

    def __init__(self, tools: GateTools) -> None:
        self.tools = tools
        self.s = tools.s
        self.gates = tools.gates
        self.fates: dict[str, tuple[bool | None, str]] = {}
        """Approved calls an `approve` update waits on, once judged: whether it runs, and why."""
        self.fate_wanted: set[str] = set()

    async def judge(
        self,
        record: StepRecord,
        tool: ToolSpec,
        call: ToolUseBlock,
        tool_call: ToolCall,
        prep: ToolPreparation | None,
        judged: Judged,
        finish: Finish,
    ) -> ToolResultBlock | None:
        """The policy, a person, fresh reads; None when the call may run, else its refusal.

        The gate decides last: whatever moved while the call waited (a policy set, a refresh,
        a raised limit) is judged again after the last wait, in the workflow task that then
        schedules the call, with nothing awaited in between.
        """
        s = self.s
        while True:
            # -- approval policy (waypoint/_workflows/policy.py): deny never runs the tool --
            if judged.route is None:  # judged once, unless it moved: a parked step keeps it
                verdict = policy.verdict(s, tool, call.input)
                judged.route = route = policy.route(tool, verdict)
                if verdict is not None:
                    policy.stamp(s, record, verdict)
                if route == "deny":
                    denied = finish(
                        f"The call to {call.name} was denied by "
                        f"{verdict.by if verdict else 'policy'}. It was not executed.",
                        True,
                        "rejected",
                        self._said(judged),
                    )
                    self.decided(record, judged.approved, text_of(denied.content))
                    return denied
            # -- end approval policy --
            route = judged.route
            checked = route == "ask" or (route == "tool" and tool.approval != "never")
            if checked or tool.runs_as != "activity":  # client and child tools: checked
                prep = prep or await self.tools._prepare(tool_call, call.name)
                if not prep.valid:
                    return finish(prep.error, True)
                asks = route == "ask" or (route == "tool" and policy.gated(tool, prep))
                if asks and not judged.approved:  # approved before the step parked: not again
                    notify = partial(self.tools.escalate, record, tool, call)
                    outcome = await self.gates.approval(record, call, tool, notify)
                    d = outcome.decision
                    if not outcome.approved:
                        why = f": {d.reason}" if d.reason else ""
                        return finish(
                            f"The call to {call.name} was rejected by {d.reviewer}{why}. "
                            "It was not executed.",
                            True,
                            "rejected",
                        )
                    policy.remember(s, record, tool, call.input, d)
                    record.status = "scheduled"
                    judged.approved = True
            # Whoever runs it (a worker, a client, a sub-agent), an effect acts on fresh reads.
            refuse = partial(finish, said=self._said(judged))
            refused = await self.tools.freshness.before_effect(tool, tool_call, refuse)
            if refused is not None:
                self.decided(record, judged.approved, text_of(refused.content))
                return refused
            if not self._moved(tool, call.input, route, judged.approved):
                self.decided(record, judged.approved, "")
                return None
            judged.route = None  # the policy changed while it waited: judge the call again

    @staticmethod
    def _said(judged: Judged) -> str:
        """An approved call refused after all says so on its ledger line (and so its event)."""
        return APPROVED_NOT_RUN if judged.approved else ""

    def _moved(self, tool: ToolSpec, arguments: dict[str, Any], route: str, approved: bool) -> bool:
        """Whether the policy in force now asks more of this call than it did when judged."""
        now = policy.route(tool, policy.verdict(self.s, tool, arguments))
        if now == route or now == "run":
            return False
        return now == "deny" or not approved

    def decided(
        self, record: StepRecord, approved: bool, refused: str, err: BaseException | None = None
    ) -> None:
        """Tell a waiting approval whether the call it approved runs (its ledger line says it)."""
        if isinstance(err, asyncio.CancelledError):  # also while the approval was on its way
            self.settled_call(record.step_id, False, "the run was cancelled before it ran")
        elif err is not None:  # a changed tool parks the step: it may run after a resume
            self.settled_call(record.step_id, None, "recorded; the call has not run yet")
        elif not approved:
            return
        elif refused:  # its ledger line says so already (`finish`'s `said`)
            self.settled_call(record.step_id, False, f"{APPROVED_NOT_RUN}{refused}")
        else:
            held = simple.holding(self.s)
            later = held[0].until if held is not None else "now"
            self.settled_call(record.step_id, True, f"approved; the call runs {later}")

    def settled_call(self, step_id: str, runs: bool | None, detail: str) -> None:
        """An approved call was judged a last time: whether it runs (None: not yet), and why."""
        if step_id in self.fate_wanted:
            self.fates[step_id] = (runs, detail)

    async def fate(self, receipt: Receipt) -> Receipt:
        """The approval's receipt once the call it approved runs or is refused after all.

        Between the approval and the call, reads are re-read and the policy judged again; the
        sender hears which way it went, not only that the approval was recorded. The tool
        funnel settles every approved call on each way out (`decided`), so this wait ends; it
        sets no timer, so it adds nothing to the run's history but the update's answer.
        """
        step_id = receipt.step_id
        outcome = self.s.decisions.get(step_id)
        if outcome is None or not outcome.approved:
            return receipt  # a repeat, or a step no longer waiting: nothing more to tell
        self.fate_wanted.add(step_id)
        try:
            await workflow.wait_condition(lambda: step_id in self.fates)
        finally:
            self.fate_wanted.discard(step_id)
        runs, detail = self.fates.pop(step_id)
        return receipt.model_copy(update={"runs": runs, "detail": detail})
