"""Sub-agent steps: a tool call that passed the funnel runs as a child `AgentWorkflow`.

Deterministic code only. The child has its own ledger, limits, approvals and history bounding.
- Its id is `{parent workflow id}--{step id}`: a resumed parent replays the recorded start and
  re-attaches to the same child; a run already holding that id is waited for, not duplicated.
- Its effect keys extend the parent step's effect key (`ParentLink.effect_key`), not its own
  run id, so they are the same across retries of the parent step and its continue-as-new.
- Parent close policy `REQUEST_CANCEL`: cancelling (or terminating) the parent asks the child to
  cancel; the child stops at its next wait and ends `cancelled`; its effects stay keyed.
- Its cost and tokens are added to the parent's totals, and it may spend at most its share of
  what is left of the parent's cost and token budgets: sub-agent calls of one reply split them
  evenly, and the child's own calls reserve within its share (`budget.py`). A child that ends
  without a result (cancelled with the parent, say) still spent: the
  parent adds what the child's memo shows, final for a cancelled child (`cancel.py`).
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import TypeVar

from temporalio import workflow
from temporalio.common import SearchAttributePair, TypedSearchAttributes
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    ChildWorkflowError,
    WorkflowAlreadyStartedError,
)
from temporalio.workflow import ParentClosePolicy

with workflow.unsafe.imports_passed_through():
    from waypoint.protocol import (
        AgentState,
        Limits,
        ParentLink,
        RunInput,
        RunMemo,
        RunResult,
        StepRecord,
        ToolCall,
        ToolOutcome,
        ToolSpec,
    )
    from waypoint.protocol import search_attributes as sa

from waypoint._workflows.steps import Steps

WORKFLOW = "AgentWorkflow"
PARENT_CLOSE_POLICY = ParentClosePolicy.REQUEST_CANCEL
"""Cancel or terminate the parent, and its running children are asked to cancel."""
ACTIVITY_TAGS = {"await_child": "attach", "child_spent": "spent"}
"""The activities that read a child run, by the tag of their activity ids (`wf_id#tag`)."""
T = TypeVar("T")


def child_id(parent_workflow_id: str, step_id: str) -> str:
    """The child workflow id of a sub-agent step: the same however often the step is resumed."""
    return f"{parent_workflow_id}--{step_id}"


def check_parent(run: RunInput) -> None:
    """Refuse a `parent` link this run did not get from a real parent.

    `RunInput` comes from any client with namespace access; a forged link would let a run take
    another run's effect keys, and reconcile would then report that run's effects as its own.
    Temporal itself says who started a child, so the link must agree with it.
    """
    link, info = run.parent, workflow.info()
    if link is None:
        return
    parent = info.parent.workflow_id if info.parent else None
    if (
        parent != link.workflow_id
        or info.workflow_id != child_id(link.workflow_id, link.step_id)
        or not link.effect_key.startswith(f"{link.workflow_id}/")
    ):
        raise ApplicationError(
            f"run {info.workflow_id} claims to be sub-agent step {link.step_id} of "
            f"{link.workflow_id}, but Temporal says its parent is {parent or 'none'}: refused",
            type="ForgedParent",
            non_retryable=True,
        )


def effect_key(run: RunInput, step_id: str) -> str:
    """A step's effect key: under the parent step's key for a sub-agent, else this run's."""
    if run.parent is not None:
        return f"{run.parent.effect_key}/{step_id}"
    info = workflow.info()
    return f"{info.workflow_id}/{info.first_execution_run_id}/{step_id}"


def capped(limits: Limits, parent: ParentLink | None) -> Limits:
    """The child's limits with its cost and token budgets cut to what the parent had left."""
    if parent is None:
        return limits
    caps: dict[str, float | int] = {}
    for field in ("max_cost_usd", "max_total_tokens"):
        own, left = getattr(limits, field), getattr(parent, field)
        if left is not None:
            caps[field] = left if own is None else min(own, left)
    return limits.model_copy(update=caps)


class ChildSteps:
    """Runs sub-agent tool calls as child workflows and accounts for them in the parent."""

    def __init__(self, steps: Steps) -> None:
        self.steps = steps
        self.s: AgentState = steps.s
        self._reserved = 0.0
        """Budget handed to children still running: not spent yet, but no longer free."""
        self._reserved_tokens = 0
        self._started: dict[int, int] = {}
        """Sub-agent calls started so far, by turn."""

    def _share(self) -> tuple[float | None, int | None]:
        """This child's cost and token caps: even shares of what is left among unstarted siblings.

        Siblings are the sub-agent calls of one reply: running side by side, they cannot
        together spend more than the parent had left.
        """
        s, limits = self.s, self.s.limits or Limits()
        siblings = max(1, self._siblings() - self._started.get(s.turn, 0))
        cost = tokens = None
        if limits.max_cost_usd is not None:
            cost = max(0.0, limits.max_cost_usd - s.cost_usd - self._reserved) / siblings
        if limits.max_total_tokens is not None:
            left = limits.max_total_tokens - s.total_tokens - self._reserved_tokens
            tokens = max(0, left) // siblings
        return cost, tokens

    def _siblings(self) -> int:
        """Sub-agent calls in this turn's reply (a continued reply keeps its calls last)."""
        children = {t.name for t in self.steps.spec.tools if t.runs_as == "child"}
        reply = self.s.messages[-1].content if self.s.messages else []
        return sum(1 for b in reply if b.type == "tool_use" and b.name in children)  # type: ignore[union-attr]

    async def run(self, tool: ToolSpec, call: ToolCall, record: StepRecord) -> ToolOutcome:
        """Start (or re-attach to) the child, wait for its answer, add its cost to the run's."""
        s, info = self.s, workflow.info()
        assert tool.child_agent is not None and record.effect_key is not None
        share, tokens = self._share()
        self._started[s.turn] = self._started.get(s.turn, 0) + 1
        link = ParentLink(
            workflow_id=info.workflow_id,
            step_id=record.step_id,
            effect_key=record.effect_key,
            max_cost_usd=share,
            max_total_tokens=tokens,
        )
        run = RunInput(
            agent=tool.child_agent,
            task=json.dumps(call.arguments, sort_keys=True),
            options=s.input.options,
            history=s.input.history,
            history_override=s.input.history_override,
            parent=link,
        )
        wf_id = child_id(info.workflow_id, record.step_id)
        record.child_workflow_id = wf_id
        self._reserved += share or 0.0
        self._reserved_tokens += tokens or 0
        try:
            handle = await workflow.start_child_workflow(
                WORKFLOW,
                run,
                id=wf_id,
                result_type=RunResult,
                parent_close_policy=PARENT_CLOSE_POLICY,
                search_attributes=TypedSearchAttributes(
                    [SearchAttributePair(sa.AGENT, tool.child_agent)]
                ),
                static_summary=f"{tool.child_agent}: sub-agent of {record.step_id}",
            )
            record.child_run_id = handle.first_execution_run_id
            self.steps.publish()
            result = await handle
        except WorkflowAlreadyStartedError:
            result = await self._attach(wf_id)
        except ChildWorkflowError as err:
            cause = err.cause or err
            self._reserved -= share or 0.0
            self._reserved_tokens -= tokens or 0
            await self._spent(record, wf_id)
            return ToolOutcome(
                content=f"Sub-agent {tool.child_agent} ({wf_id}) ended without an answer: "
                f"{cause}. Effects it completed stand; see `waypoint ledger {wf_id}`.",
                is_error=True,
            )
        self._reserved -= share or 0.0
        self._reserved_tokens -= tokens or 0
        return self._account(tool, record, result)

    async def _attach(self, wf_id: str) -> RunResult:
        """A run already holds the child's id (e.g. the parent was reset): wait for it."""
        summary = f"wait for sub-agent {wf_id}"
        return await self._ask("await_child", wf_id, RunResult, timedelta(days=365), 1000, summary)

    async def _ask(
        self, name: str, wf_id: str, result: type[T], wait: timedelta, tries: int, summary: str
    ) -> T:
        """Activity `waypoint.{name}` on the child run `wf_id`, its id tagged (`ACTIVITY_TAGS`)."""
        return await workflow.execute_activity(
            f"waypoint.{name}",
            wf_id,
            result_type=result,
            activity_id=f"{wf_id}#{ACTIVITY_TAGS[name]}",
            start_to_close_timeout=wait,
            heartbeat_timeout=self.s.input.options.tool_heartbeat_timeout,
            retry_policy=self.steps.retry_policy(tries),
            summary=summary,
        )

    async def _spent(self, record: StepRecord, wf_id: str) -> None:
        """Add what a child that ended without a result spent, as its memo shows it."""
        try:
            summary = f"what sub-agent {wf_id} spent"
            memo = await self._ask("child_spent", wf_id, RunMemo, timedelta(seconds=30), 5, summary)
        except ActivityError as err:
            workflow.logger.warning("%s: what it spent is unknown: %s", wf_id, err.cause or err)
            return
        self._add(record, memo)

    def _add(self, record: StepRecord, spent: RunMemo | RunResult) -> None:
        """Count what a child spent on its step and in the parent's totals."""
        s = self.s
        record.tokens = spent.total_tokens
        record.cost_usd = spent.cost_usd if spent.cost_known else None
        s.total_tokens += spent.total_tokens
        s.cost_usd += spent.cost_usd
        s.cost_known = s.cost_known and spent.cost_known

    def _account(self, tool: ToolSpec, record: StepRecord, result: RunResult) -> ToolOutcome:
        self._add(record, result)
        if result.state != "done":
            return ToolOutcome(
                content=f"Sub-agent {tool.child_agent} ended {result.state}: "
                f"{result.stop_details or result.output}",
                is_error=True,
            )
        if result.output_json is not None:
            return ToolOutcome(content=json.dumps(result.output_json, sort_keys=True))
        return ToolOutcome(content=result.output)
