"""Where a run waits for a person: approvals, unclear effects, limits. Deterministic code only."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import datetime

from temporalio import workflow

from waypoint._workflows import decisions, simple
from waypoint._workflows.admission import Admission
from waypoint._workflows.handover import Handover
from waypoint._workflows.notices import Notices

with workflow.unsafe.imports_passed_through():
    from waypoint.protocol import (
        AgentState,
        ApprovalDecision,
        ApprovalOutcome,
        IgnoredSignal,
        Limits,
        PendingApproval,
        Resolution,
        ResumeRequest,
        StepRecord,
        ToolSpec,
        ToolUseBlock,
        Unresolved,
    )
    from waypoint.protocol import verbs as v
    from waypoint.protocol.handover import OpenWait
    from waypoint.protocol.hashing import keyed_sha256_hex
    from waypoint.protocol.run import EarlyResume
    from waypoint.protocol.states import FINAL_STATES, RESUMABLE_STATES


class Gates(Admission):
    """The run's waits and the signals that end them; every wait is recorded in the state."""

    def __init__(self, s: AgentState, publish: Callable[[], None]) -> None:
        self.s = s
        self.publish = publish
        self.parks = 0
        """Model-step and limit parks that have ended: after one, reads may have gone stale."""
        self.park: tuple[str, str] | None = None
        """The run's own park in progress (a model step's outage, a limit): state and detail."""
        self.notices = Notices(s, publish)  # who is told of each wait, beside the run
        self.handover = Handover(s)
        """Races the waits against the history budget (`workflows/handover.py`)."""

    # --- approvals --------------------------------------------------------------------------

    async def approval(
        self,
        record: StepRecord,
        call: ToolUseBlock,
        tool: ToolSpec,
        escalate: Callable[[int, float], Awaitable[None]],
    ) -> ApprovalOutcome:
        """Wait for `approve` or `reject` of exactly this call and these arguments.

        With an `approval_timeout`, a silent reviewer either rejects the call (the model is told)
        or escalates: `escalate(reminder, waited_seconds)` runs, then again every `remind_every`.
        """
        s, step_id = self.s, record.step_id
        if step_id not in s.pending and step_id not in s.decisions:
            s.pending[step_id] = PendingApproval(
                step_id=step_id,
                tool=call.name,
                arguments=call.input,
                arguments_hash=keyed_sha256_hex(s.spec.hash_salt if s.spec else "", call.input),
                requested_at=workflow.now().isoformat(),
                rule=record.rule,
            )
        record.status = "awaiting_approval"
        self.settle()
        if (pending := s.pending.get(step_id)) is not None:
            self.notices.approval(record, call, pending.requested_at, tool)
        note, decided = self.handover.note(step_id, "approval"), lambda: step_id in s.decisions
        timed_out = not await self.handover.wait_for(decided, note, tool.approval_timeout)
        if timed_out and tool.on_approval_timeout == "reject":
            reason = f"no decision within {tool.approval_timeout}"
            s.decisions[step_id] = ApprovalOutcome(
                approved=False,
                decision=ApprovalDecision(step_id=step_id, reviewer="timeout", reason=reason),
            )
            decisions.stamp(s, step_id, "timeout")
        elif timed_out:
            while True:  # numbered on from a handed-over wait's reminders
                await escalate(note.reminders, self._waited(s.pending[step_id].requested_at))
                note.reminders += 1
                if await self.handover.wait_for(decided, note, tool.remind_every):
                    break
        s.pending.pop(step_id, None)
        self.settle()  # the stream reads the verdict from `decisions`: settle, then pop
        return self.notices.approved(record, s.decisions.pop(step_id))

    @staticmethod
    def _waited(requested_at: str) -> float:
        return (workflow.now() - datetime.fromisoformat(requested_at)).total_seconds()

    async def apply_approval(
        self, signal: str, decision: ApprovalDecision, *, approved: bool
    ) -> str:
        """Apply an approval, or record why it was ignored; returns the refusal reason or ''."""
        s, step_id = self.s, decision.step_id
        why = await self.admit(
            signal, step_id, decision, lambda: decisions.approval_refusal(s, decision)
        )
        if why is not None:
            return why
        s.decisions[step_id] = ApprovalOutcome(approved=approved, decision=decision)
        signed = decision.signature is not None and self.signed_only()
        decisions.stamp(s, step_id, decisions.who(decision.reviewer, decision.identity, signed))
        self.applied(decision.decision_id, step_id)
        return ""

    # --- unclear effects --------------------------------------------------------------------

    async def resolution(self, record: StepRecord, reason: str) -> Resolution:
        """Park until an operator says what happened to an effect nobody can confirm."""
        s, step_id = self.s, record.step_id
        s.unresolved[step_id] = Unresolved(
            step_id=step_id, tool=record.tool or "", effect_key=record.effect_key, reason=reason
        )
        record.status = "needs_reconciliation"
        record.summary = reason[:160]
        self.settle()
        note = self.handover.note(step_id, "resolution")  # handed over, it waits on here
        await self.handover.wait(lambda: step_id in s.resolutions, None, note)
        s.unresolved.pop(step_id, None)
        self.settle()
        return s.resolutions.pop(step_id)

    async def resolve(self, resolution: Resolution) -> str:
        """Apply a resolution, or record why it was ignored; returns the refusal reason or ''."""
        s, step_id = self.s, resolution.step_id
        why = await self.admit(
            v.RESOLVE, step_id, resolution, lambda: decisions.resolution_refusal(s, resolution)
        )
        if why is not None:
            return why
        s.resolutions[step_id] = resolution
        signed = resolution.signature is not None and self.signed_only()
        decisions.stamp(s, step_id, decisions.who(resolution.reviewer, resolution.identity, signed))
        self.applied(resolution.decision_id, step_id)
        return ""

    # --- outages ----------------------------------------------------------------------------

    async def model_unavailable(
        self, record: StepRecord, reason: str, note: OpenWait | None = None
    ) -> None:
        """Park a model step whose retries ran out until an operator says `resume`.

        With a `note`, the park may be handed to the next history segment (`handover.py`).
        """
        await self._parked_model_step(record, reason, "model_unavailable", note)

    async def request_invalid(
        self, record: StepRecord, reason: str, note: OpenWait | None = None
    ) -> None:
        """Park a model step whose request the API rejected until an operator says `resume`.

        Sent again unchanged it fails the same way: only when asked (a fixed worker, a correction).
        """
        await self._parked_model_step(record, reason, "request_invalid", note)

    def resume(self, request: ResumeRequest) -> None:
        """The `resume` signal: wakes what is parked in a `RESUMABLE_STATES` state.

        It is kept until its workflow task ends: replay applies a task's signals before its
        activity results, where a live worker may have parked a failed step first. Every park
        of the task takes it, so both agree (seed 6127); one that woke nothing is refused.
        """
        s = self.s
        parked = s.state in RESUMABLE_STATES or bool(s.tool_changed)
        self._refuse_early_resumes()
        now = workflow.now().isoformat()
        s.early_resume = s.early_resume or EarlyResume(at=now, was=s.state)
        s.early_resume.replans.append(request.replan)
        s.early_resume.woke = s.early_resume.woke or parked
        if parked:
            self._wake(request.replan)

    def parked(self) -> None:
        """Called by each park once it shows: wakes it for `resume`s sent in its task."""
        self._refuse_early_resumes()
        if (early := self.s.early_resume) is not None:
            early.woke = True
            for replan in early.replans:
                self._wake(replan)

    def _wake(self, replan: bool) -> None:
        self.s.resume_replans = replan and bool(self.s.tool_changed)
        self.s.resumes += 1

    def _refuse_early_resumes(self, ended: bool = False) -> None:
        """Refuse kept `resume`s whose workflow task ended with nothing parked, or the run."""
        early = self.s.early_resume
        if early is None or (early.at == workflow.now().isoformat() and not ended):
            return
        self.s.early_resume = None
        for _ in early.replans if not early.woke else ():
            self.ignore(v.RESUME, "", early.refusal())

    async def tool_changed(self, record: StepRecord, reason: str) -> bool:
        """Park a step whose tool changed under `on_change="refuse"`; True means replan.

        The run ended failed before, its earlier effects done and nothing to continue it. Now
        rolling the tool back and `resume` runs the step as the run began, and
        `resume --replan` tells the model the tool changed, as `on_change="replan"` would.
        """
        s = self.s
        line = " ".join(reason.split())
        record.summary = f"parked: {line}"[:160]
        s.tool_changed[record.step_id] = f"step {record.step_id}: {line}"
        self.settle()
        seen, note = s.resumes, self.handover.note(record.step_id, "tool_changed")
        self.parked()
        try:  # not `finally`: a handover carries the park
            await self.handover.wait(lambda: s.resumes > seen, None, note)
        except asyncio.CancelledError:  # the run was cancelled: the step never ran
            record.status = "error"
            record.summary = f"cancelled while parked, not run: {line}"[:160]
            del s.tool_changed[record.step_id]
            raise
        del s.tool_changed[record.step_id]
        self.settle()
        return s.resume_replans

    async def _parked_model_step(
        self, record: StepRecord, reason: str, state: str, note: OpenWait | None
    ) -> None:
        s = self.s
        line = " ".join(reason.split())
        s.last_model_error = line
        record.summary = f"parked: {line}"[:160]
        seen = s.resumes
        await self._park(state, line[:300], lambda: s.resumes > seen, note, woken=True)
        s.last_model_error = ""
        record.summary = f"retried after resume: {line}"[:160]
        self.settle()

    # --- limits -----------------------------------------------------------------------------

    def limit_hit(self) -> str:
        """Which limit the run has reached, or ''."""
        s, limits = self.s, self.s.limits or Limits()
        if s.turn >= limits.max_turns:
            return f"max_turns={limits.max_turns} reached"
        if limits.max_total_tokens is not None and s.total_tokens >= limits.max_total_tokens:
            return f"max_total_tokens={limits.max_total_tokens} reached"
        if limits.max_cost_usd is not None and s.cost_usd >= limits.max_cost_usd:
            return f"max_cost_usd={limits.max_cost_usd} reached"
        return ""

    async def before_step(self, note: OpenWait | None = None) -> None:
        """Every model and tool step passes here: none starts while something holds the run.

        What holds it (a pause) is `simple.HOLDINGS`; the verb that lets go goes on from here.
        `note`: the wait, which may be handed to the next history segment (`handover.py`).
        A summary step parked at the handover is taken up first (`Handover.first`).
        """
        if (first := self.handover.first) is not None:
            self.handover.first = None
            await first()
        if simple.holding(self.s) is not None:
            self.settle()
            await self.handover.until(lambda: simple.holding(self.s) is None, note)
            self.settle()

    async def within_limits(
        self, check: Callable[[], str] | None = None, note: OpenWait | None = None
    ) -> None:
        """Park, not fail, at a limit: `raise_limits` continues exactly here."""
        check = check or self.limit_hit
        hit = check()
        if hit:
            await self._park("limit_reached", hit, lambda: not check(), note)
            self.settle()

    async def _park(
        self,
        state: str,
        detail: str,
        over: Callable[[], bool],
        note: OpenWait | None,
        woken: bool = False,
    ) -> None:
        """Show the run parked in `state` until `over()`; `woken`: by `resume`s of its task too.

        `settle` shows the park over a pause, as it shows a waiting approval: `resume` or a
        raise still moves it, and an unpause shows it parked again, not running (it still waits).
        """
        self.park = (state, detail)
        self.set_state(state, detail)
        if woken:
            self.parked()
        try:
            await self.handover.until(over, note)
        finally:
            self.park = None
        self.parks += 1

    def resume_budget_hit(self) -> str:
        """Whether the run has used up its continue-as-new budget."""
        budget = (self.s.limits or Limits()).max_continue_as_new
        if self.s.continues >= budget:
            return f"max_continue_as_new={budget} reached (resume budget)"
        return ""

    # --- state ------------------------------------------------------------------------------

    def settle(self) -> None:
        """Derive the run's state from what it waits for: effects, tools, approvals, answers."""
        s = self.s
        if s.unresolved:
            self.set_state("needs_reconciliation", ", ".join(s.unresolved))
        elif s.tool_changed:
            self.set_state("tool_changed", "; ".join(s.tool_changed.values())[:300])
        elif any(p not in s.decisions for p in s.pending):
            self.set_state("awaiting_approval", ", ".join(s.pending))
        elif any(q not in s.answers for q in s.questions):
            self.set_state("awaiting_answer", ", ".join(s.questions))
        elif self.park is not None:
            self.set_state(*self.park)
        elif (held := simple.holding(s)) is not None:
            self.set_state(held[0].state, held[1])
        else:
            self.set_state("running")

    def set_state(self, state: str, detail: str = "") -> None:
        """Change the run's state and show it."""
        self._refuse_early_resumes(ended=state in FINAL_STATES)
        self.s.state = state  # type: ignore[assignment]
        self.s.detail = detail
        self.publish()

    def ignore(self, signal: str, step_id: str, reason: str) -> None:
        """Record a signal that could not be applied, and why; the latest few are listed."""
        workflow.logger.warning("ignored %s for %s: %s", signal, step_id, reason)
        s = self.s
        s.ignored_signals.append(IgnoredSignal(signal=signal, step_id=step_id, reason=reason))
        over = len(s.ignored_signals) - s.history_budget().keep_ignored_signals
        if over > 0:  # a flood of bad signals must not grow what the run carries
            del s.ignored_signals[:over]
            s.ignored_dropped += over
