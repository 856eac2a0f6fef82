"""Telling the people a run waits on: when, to whom, and delivery beside the run. Deterministic.

A call that waits for approval, or a question for an answer, is watched by a task of its own:
it reads the agent's plan (`waypoint.notice_plan`, once a history segment, at its first wait),
sends `waiting`, then races workflow timers (`reminder` every `remind_after`, `escalated` after
`escalate_after`) against the wait's end, which it tells as `decided` or `timed_out`. Timers
count from the wait's own `requested_at` / `asked_at`, so a restart or a continue-as-new does
not start them again. Each notice goes to each channel by one `waypoint.notify` activity
under the key `{workflow_id}/{chain}/{step_id}/{event}/{n}` (`chain`: the first execution's
run id, as in an effect key, so a rerun under the same workflow id is told again), started
beside the run and never awaited by a step; its outcome is a ledger line of its own,
`{step_id}.notice.{event}.{n}.{channel}`. No plan (the activity is not registered) or an
empty one: nobody is told, nothing else changes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from waypoint.protocol import (
        AgentState,
        ApprovalOutcome,
        ClientAnswer,
        StepRecord,
        ToolSpec,
        ToolUseBlock,
    )
    from waypoint.protocol import verbs as v
    from waypoint.protocol.hashing import sha256_hex
    from waypoint.protocol.notice_state import NoticeWait
    from waypoint.protocol.notices import (
        NOTICE_PLAN,
        NOTIFY,
        Delivery,
        Notice,
        NoticeEvent,
        NoticePlan,
        NoticeRequest,
    )
    from waypoint.protocol.queues import agent_queue
    from waypoint.protocol.states import STEP_FINAL

from waypoint._workflows import events
from waypoint._workflows.retries import backoff

UNREGISTERED = "NotFoundError"
"""How Temporal fails an activity no worker on the queue registers: no plan, nobody told."""
SHOWN: dict[str, Literal["completed", "error"]] = {
    "sent": "completed",
    "duplicate": "completed",
    "unknown": "completed",  # it may have gone out: never reported failed
    "failed": "error",
}


@dataclass
class Wait:
    """One wait as its watcher sees it: what the notices show, and its fallback escalation."""

    kind: Literal["approval", "question"]
    step_id: str
    tool: str
    arguments: dict[str, Any]
    since: str
    rule: str | None
    escalate_at: timedelta | None
    """The approval's own timeout when it escalates: the plan's escalation then, if it names
    no `escalate_after`."""


@dataclass
class End:
    """How a wait ended: `decided` (approved, rejected, answered) or `timed_out`."""

    event: NoticeEvent
    decision: str
    decided_by: str = ""
    reason: str = ""


def line_id(request: NoticeRequest) -> str:
    """The delivery's ledger line and activity id: `{step_id}.notice.{event}.{n}.{channel}`."""
    notice = request.notice
    n = notice.key.rsplit("/", 1)[-1]
    return f"{notice.step_id}.notice.{notice.event}.{n}.{request.channel}"


class Notices:
    """The watchers of this segment's waits and the deliveries they started."""

    def __init__(self, s: AgentState, publish: Callable[[], None]) -> None:
        self.s = s
        self.publish = publish
        self._plan: asyncio.Task[NoticePlan] | None = None
        self._ends: dict[str, End] = {}
        self._watching: dict[str, int] = {}
        """By step id: the watcher of its current wait (a new wait of the step retires it)."""
        self._tasks: dict[str, asyncio.Task[None]] = {}
        """Watchers and deliveries of this segment, by step id or ledger line."""

    # --- the hooks the waits call -----------------------------------------------------------

    def approval(self, record: StepRecord, call: ToolUseBlock, since: str, tool: ToolSpec) -> None:
        """A call starts, or in a new segment goes on, waiting for approval."""
        escalates = tool.on_approval_timeout == "escalate"
        at = tool.approval_timeout if escalates else None
        self._watch(Wait("approval", record.step_id, call.name, call.input, since, record.rule, at))

    def question(self, record: StepRecord, call: ToolUseBlock, since: str) -> None:
        """A client-answered call starts, or goes on, waiting for its answer."""
        self._watch(Wait("question", record.step_id, call.name, call.input, since, None, None))

    def approved(self, record: StepRecord, outcome: ApprovalOutcome) -> ApprovalOutcome:
        """The approval wait ended, decided by someone or by its timeout; returns `outcome`."""
        d = outcome.decision
        if d.reviewer == "timeout" and not outcome.approved:
            self._ends[record.step_id] = End("timed_out", "timeout", reason=d.reason)
        else:
            decision = "approved" if outcome.approved else "rejected"
            by = record.decided_by or ""
            self._ends[record.step_id] = End("decided", decision, by, d.reason)
        return outcome

    def answered(self, record: StepRecord, answer: ClientAnswer | None) -> None:
        """The question's wait ended: answered, or nobody did in time."""
        if answer is None:
            self._ends[record.step_id] = End("timed_out", "timeout")
        else:
            self._ends[record.step_id] = End("decided", "answered", record.decided_by or "")

    # --- the run's own edges ----------------------------------------------------------------

    def resume(self) -> None:
        """Start again the deliveries the last segment handed over unreported (same keys)."""
        for book in self.s.notices.values():
            book.inflight = [r.model_copy(update={"carried": True}) for r in book.inflight]
            for request in book.inflight:
                self._start(request)

    def handover(self) -> None:
        """Before continue-as-new: forget the steps whose waits and deliveries are all over."""
        final = {r.step_id for r in self.s.ledger if r.status in STEP_FINAL}
        for step_id, book in list(self.s.notices.items()):
            if book.ended and not book.inflight and step_id in final:
                del self.s.notices[step_id]

    async def drain(self) -> None:
        """As the run ends: let deliveries report for at most `notice_drain`, then say so."""
        if all(t.done() for t in self._tasks.values()):
            return
        limit = self.s.input.options.notice_drain
        if limit > timedelta(0):
            try:
                await workflow.wait_condition(
                    lambda: all(t.done() for t in self._tasks.values()), timeout=limit
                )
            except TimeoutError:
                pass
        for task in self._tasks.values():
            if not task.done():
                task.cancel()  # abandoned: the activity is not waited for
        for book in self.s.notices.values():
            for request in list(book.inflight):
                why = f"not confirmed: the run ended before it reported (waited {limit})"
                self._settle(book, request, "cancelled", why)

    # --- watching a wait --------------------------------------------------------------------

    def _watch(self, wait: Wait) -> None:
        self._ends.pop(wait.step_id, None)
        token = self._watching.get(wait.step_id, 0) + 1
        self._watching[wait.step_id] = token
        self._tasks[wait.step_id] = asyncio.create_task(self._watcher(wait, token))

    def _over(self, step_id: str, token: int) -> bool:
        return step_id in self._ends or self._watching.get(step_id) != token

    async def _watcher(self, wait: Wait, token: int) -> None:
        plan = await self.plan()
        if not plan.routes or self._watching.get(wait.step_id) != token:
            return
        book = self.s.notices.get(wait.step_id)
        if book is None or book.since != wait.since:  # a new wait, not one handed over
            if wait.step_id in self._ends:
                return  # decided before anyone could be told: nobody needs to be
            book = NoticeWait(
                kind=wait.kind,
                since=wait.since,
                counts=book.counts if book else {},
                inflight=book.inflight if book else [],
            )
            self.s.notices[wait.step_id] = book
            self._send(plan, wait, book, "waiting", [_role(wait.kind)])
        since = datetime.fromisoformat(wait.since)
        while not self._over(wait.step_id, token):
            due = _next(plan, wait, book, since)
            if due is None:
                await workflow.wait_condition(lambda: self._over(wait.step_id, token))
                break
            at, event = due
            if at > workflow.now():
                try:
                    await workflow.wait_condition(
                        lambda: self._over(wait.step_id, token), timeout=at - workflow.now()
                    )
                    break
                except TimeoutError:
                    pass
            if event == "reminder":
                assert plan.remind_after is not None
                passed = int((workflow.now() - since) / plan.remind_after)
                book.reminded = max(book.reminded + 1, passed)  # late: one reminder, not many
                self._send(plan, wait, book, "reminder", [_role(wait.kind)])
            else:
                book.escalated = True
                self._send(plan, wait, book, "escalated", [plan.escalate_to or ""])
        end = self._ends.get(wait.step_id)
        if end is None or self._watching.get(wait.step_id) != token or book.ended:
            return
        book.ended = True
        self._send(plan, wait, book, end.event, book.told, end)

    async def plan(self) -> NoticePlan:
        """The agent's plan, read once a segment as a recorded step; none: nobody is told."""
        if self._plan is None:
            self._plan = asyncio.create_task(self._read_plan())
        return await self._plan

    async def _read_plan(self) -> NoticePlan:
        opts = self.s.input.options
        try:
            return await workflow.execute_activity(
                NOTICE_PLAN,
                self.s.input.agent,
                result_type=NoticePlan,
                task_queue=self._queue(),
                start_to_close_timeout=opts.spec_timeout,
                heartbeat_timeout=opts.tool_heartbeat_timeout,  # a worker killed: retried soon
                retry_policy=backoff(opts, 3, UNREGISTERED),
                summary=f"notice plan {self.s.input.agent}",
            )
        except ActivityError as err:
            workflow.logger.info("no notice plan for %s: %s", self.s.input.agent, err.cause)
            return NoticePlan()

    # --- delivery ---------------------------------------------------------------------------

    def _send(
        self,
        plan: NoticePlan,
        wait: Wait,
        book: NoticeWait,
        event: NoticeEvent,
        roles: list[str],
        end: End | None = None,
    ) -> None:
        """One notice of `event` to the channels of `roles`, each a delivery of its own."""
        channels = list(dict.fromkeys(c for r in roles for c in plan.routes.get(r, [])))
        if not channels:
            return
        n = book.counts.get(event, 0) + 1
        book.counts[event] = n
        book.told = [*book.told, *(r for r in roles if r not in book.told)]
        info = workflow.info()
        run = info.workflow_id
        notice = Notice(
            key=f"{run}/{info.first_execution_run_id}/{wait.step_id}/{event}/{n}",
            event=event,
            kind=wait.kind,
            agent=self.s.input.agent,
            run=run,
            step_id=wait.step_id,
            tool=wait.tool,
            arguments=wait.arguments,
            since=wait.since,
            role=roles[0],
            rule=wait.rule,
            cost_usd=self.s.cost_usd,
            decision=end.decision if end else "",
            decided_by=end.decided_by if end else "",
            reason=end.reason if end else "",
        )
        for channel in channels:
            request = NoticeRequest(notice=notice, channel=channel)
            book.inflight = [*book.inflight, request]
            self._start(request)

    def _start(self, request: NoticeRequest) -> None:
        """Start a delivery beside the run, with its ledger line (a carried one is reused)."""
        name = line_id(request)
        if not any(r.step_id == name for r in reversed(self.s.ledger)):
            notice = request.notice
            self.s.ledger.append(
                StepRecord(
                    step_id=name,
                    kind="notice",
                    tool=request.channel,
                    input_hash=sha256_hex([notice.key, request.channel]),
                    summary=f"{notice.event} to {notice.role} via {request.channel}",
                )
            )
            events.sync()
        self._tasks[name] = asyncio.create_task(self._deliver(request, name))

    async def _deliver(self, request: NoticeRequest, name: str) -> None:
        opts = self.s.input.options
        notice = request.notice
        try:
            delivery = await workflow.execute_activity(
                NOTIFY,
                request,
                result_type=Delivery,
                activity_id=name,
                task_queue=self._queue(),
                start_to_close_timeout=opts.notice_timeout,
                heartbeat_timeout=opts.tool_heartbeat_timeout,  # the send heartbeats
                retry_policy=backoff(opts, opts.notice_max_attempts, UNREGISTERED),
                cancellation_type=workflow.ActivityCancellationType.ABANDON,
                summary=f"notify {request.channel}: {notice.event} {notice.step_id}",
            )
        except ActivityError as err:
            cause = getattr(err.cause, "message", "") or str(err.cause or err)
            status, said, attempts = "error", f"not confirmed: {cause}", 0
        else:
            status, attempts = SHOWN[delivery.status], delivery.attempts
            said = delivery.status + (f": {delivery.detail}" if delivery.detail else "")
        book = self.s.notices.get(notice.step_id)
        if book is not None and request in book.inflight:
            self._settle(book, request, status, said, attempts)

    def _settle(
        self, book: NoticeWait, request: NoticeRequest, status: str, said: str, attempts: int = 0
    ) -> None:
        """Write a delivery's outcome on its line; it is no longer in flight."""
        book.inflight = [r for r in book.inflight if r != request]
        name = line_id(request)
        line = next((r for r in reversed(self.s.ledger) if r.step_id == name), None)
        if line is not None:
            notice = request.notice
            line.status = status  # type: ignore[assignment]
            line.attempt = attempts or line.attempt
            line.summary = f"{notice.event} to {notice.role} via {request.channel}: {said}"[:160]
        self.publish()

    def _queue(self) -> str:
        """The agent's queue: the workers that host it hold its notification settings."""
        return agent_queue(workflow.info().task_queue, self.s.input.agent)


def _role(kind: str) -> str:
    """Who a wait is for: the role of the verb that ends it (approve, answer)."""
    return v.VERBS[v.APPROVE if kind == "approval" else v.ANSWER].role


def _next(
    plan: NoticePlan, wait: Wait, book: NoticeWait, since: datetime
) -> tuple[datetime, NoticeEvent] | None:
    """The next timer of the wait, counted from when it began; None: none is left."""
    due: list[tuple[datetime, NoticeEvent]] = []
    escalate_after = plan.escalate_after or wait.escalate_at
    if plan.escalate_to and escalate_after is not None and not book.escalated:
        due.append((since + escalate_after, "escalated"))
    if plan.remind_after is not None and plan.remind_after > timedelta(0):
        due.append((since + plan.remind_after * (book.reminded + 1), "reminder"))
    return min(due, key=lambda d: d[0]) if due else None
