"""`AgentWorkflow`: the agent loop as a deterministic Temporal workflow.

model step -> the tool calls it asked for (in parallel) -> tool results -> next model step,
until the model ends its turn. Steps live in `steps.py`, waits for people in `gates.py`, the
queries in `queries.py`; this module holds the loop, the signals and the updates. No I/O, clock
or randomness here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from pydantic import BaseModel
from temporalio import workflow
from temporalio.common import RawValue

with workflow.unsafe.imports_passed_through():
    from waypoint.protocol import (
        AgentState,
        ApprovalDecision,
        ClientAnswer,
        Correction,
        Limits,
        Message,
        Receipt,
        Resolution,
        ResumeRequest,
        RunInput,
        RunResult,
        Steer,
        TextBlock,
        ToolUseBlock,
    )
    from waypoint.protocol import verbs as v
    from waypoint.protocol.policy import PolicyChange
    from waypoint.protocol.verbs import Hold
    from waypoint.protocol.vocabulary import MAX_TOKENS, REFUSAL

from waypoint.workflows import (
    answers,
    budget,
    cancel,
    children,
    decisions,
    forks,
    operator,
    policy,
    replan,
)
from waypoint.workflows.carry import Carry
from waypoint.workflows.events import RunEvents
from waypoint.workflows.gates import Gates
from waypoint.workflows.history_meter import HistoryMeter
from waypoint.workflows.model_steps import ModelSteps
from waypoint.workflows.output import OutputSteps
from waypoint.workflows.queries import Queries
from waypoint.workflows.steps import Steps
from waypoint.workflows.tool_steps import ToolSteps
from waypoint.workflows.visibility import Visibility

T = TypeVar("T", bound=BaseModel)


@workflow.defn(name="AgentWorkflow")
class AgentWorkflow(Queries):
    """Runs one agent on one task; resumes from its history after any crash."""

    @workflow.init
    def __init__(self, input: RunInput) -> None:
        self.s = input.resume or AgentState(input=input, limits=input.limits)
        self.events = RunEvents(self.s, input.stream)
        self.gates = Gates(self.s, self._publish)
        self.steps = Steps(self.s, self.gates, self._publish)
        self.model = ModelSteps(self.steps)
        self.steering = self.model.steering
        self.tools = ToolSteps(self.steps)
        self.model.reread = self.tools.freshness.before_model
        self.output = OutputSteps(self.steps)
        self.visibility = Visibility(self.s)
        self._limits_before_spec = False
        """`raise_limits` came before the spec (sent with the start): its price check waits."""
        self.carry = Carry(self.s)
        self.meter = HistoryMeter(self.steps)
        self.handover = self.gates.handover  # a waiting run hands over too (handover.py)
        self.handover.attach(self.meter, self._hand_over)
        self.loading = ""
        """Why a signal is refused now: a fork is loading the state it starts from."""

    @workflow.run
    @cancel.shown  # a cancelled run's memo shows it so, with its totals
    async def run(self, input: RunInput) -> RunResult:
        """Load the spec, then alternate model and tool steps until the model is done."""
        s = self.s
        children.check_parent(input)  # a forged sub-agent link would borrow others' keys
        forks.check_resume(input)  # so would a forged state, with its own spec and approvals
        if input.fork is not None and input.resume is None:
            await self._fork(input)
        if s.spec is None:
            s.spec = replan.with_run_options(s, await self.steps.load_spec("t0.spec"))
            why = budget.unpriced(s.spec, s.limits) if self._limits_before_spec else ""
            if why:
                self.gates.ignore(v.RAISE_LIMITS, "", why)  # refused, not the run failed
                s.limits = input.limits
            elif self._limits_before_spec:
                operator.limits_set(s, input.limits or s.spec.limits)
            s.limits = s.limits or s.spec.limits
            s.limits = children.capped(s.limits, input.parent)  # a sub-agent: parent's budget
            budget.refuse_unpriced(s)
        if not s.messages:
            task = Message(role="user", content=[TextBlock(text=input.task), *input.attachments])
            self.steps.append(task)
        if self.handover.carried is None:  # else it shows the wait it goes on with
            self.gates.set_state("running")
        self.gates.notices.resume()  # deliveries the last segment handed over, same keys
        if (waiting := self.handover.resumed_turn()) is not None:
            await self._act(*waiting)  # handed over as its calls waited: they go on waiting
        while True:
            await self.gates.held(handed=True)  # paused: no step until unpaused
            await self.gates.within_limits(handed=True)
            s.turn += 1
            await self.tools.freshness.before_model()  # stale `fresh_for` reads, read again
            operator.deliver_notes(s)
            response = await self.model.turn()
            if response.content:
                self.steps.append(Message(role="assistant", content=response.content))
            if response.stop_reason == REFUSAL:
                break
            calls = [b for b in response.content if isinstance(b, ToolUseBlock)]
            cut_off = response.stop_reason == MAX_TOKENS
            calls, feedback = await self.output.review(calls, cut_off)
            if s.output_json is not None or not (calls or feedback or self.steering.goes_on()):
                break  # a steer as the model ended its turn is read, unless no turn is left
            await self._act(calls, feedback, cut_off)
        await self.gates.notices.drain()  # a bounded wait, then "not confirmed"
        self.steering.undelivered()
        ended = self.output.finish(response)
        return await self.events.ended(ended)

    async def _act(self, calls: list[ToolUseBlock], feedback: list, cut_off: bool) -> None:
        """Run the reply's calls, answer them, and continue-as-new if the budget is reached."""
        self.handover.begin(calls, feedback, cut_off)
        results = await self.tools.reply(calls, cut_off) if calls else []
        self.handover.end()
        self.steps.append(Message(role="user", content=[*results, *feedback]))
        if await self.meter.full(self.s.history_budget()):
            await self._continue_as_new()

    async def _continue_as_new(self) -> None:
        """Hand the state, transcript compacted and ledger bounded, to a fresh history segment."""
        await self.gates.within_limits(self.gates.resume_budget_hit)
        await self.model.compact()
        await self._hand_over()

    async def _hand_over(self, still: Callable[[], bool] = lambda: True) -> None:
        """Continue-as-new once handlers have finished, unless `still()` stops holding first."""
        self.events.detach()
        await workflow.wait_condition(lambda: workflow.all_handlers_finished() or not still())
        if not still():
            return  # a waiting run's decision came as its handlers drained: it goes on
        self.s.continues += 1
        self.gates.notices.handover()
        state, keep_events = self.carry.handover()
        carry = {"resume": state, "stream": self.events.state(keep_events)}
        workflow.continue_as_new(self.s.input.model_copy(update=carry))

    async def _fork(self, input: RunInput) -> None:
        """Load the state this fork starts from, and take it by continue-as-new."""
        self.loading = forks.LOADING
        carry = await forks.load(input, self.steps)
        await workflow.wait_condition(workflow.all_handlers_finished)
        self.events.detach()
        workflow.continue_as_new(carry)

    # --- signals ----------------------------------------------------------------------------

    @workflow.signal(name=v.APPROVE)
    async def approve(self, raw: RawValue) -> None:
        """Approve the pending tool call named by the decision (for when no worker is up)."""
        decision = self._decode(v.APPROVE, raw, ApprovalDecision)
        if decision is not None:
            await self.gates.apply_approval(v.APPROVE, decision, approved=True)

    @workflow.signal(name=v.REJECT)
    async def reject(self, raw: RawValue) -> None:
        """Reject the pending tool call; the model is told who rejected it and why."""
        decision = self._decode(v.REJECT, raw, ApprovalDecision)
        if decision is not None:
            await self.gates.apply_approval(v.REJECT, decision, approved=False)

    @workflow.signal(name=v.RESOLVE)
    async def resolve(self, raw: RawValue) -> None:
        """Say what happened to an effect step that reconciliation could not confirm."""
        resolution = self._decode(v.RESOLVE, raw, Resolution)
        if resolution is not None:
            await self.gates.resolve(resolution)

    @workflow.update(name=v.APPROVE)
    async def approve_now(self, decision: ApprovalDecision) -> Receipt:
        """Approve, and answer the sender once it is recorded."""
        why = await self.gates.apply_approval(v.APPROVE, decision, approved=True)
        receipt = self._receipt(decision.step_id, "approved", why)
        return receipt if why else await self.tools.gate.fate(receipt)

    @approve_now.validator
    def _check_approve(self, decision: ApprovalDecision) -> None:
        decisions.refuse(decisions.approval_refusal(self.s, decision))

    @workflow.update(name=v.REJECT)
    async def reject_now(self, decision: ApprovalDecision) -> Receipt:
        """Reject, and answer the sender once it is recorded."""
        why = await self.gates.apply_approval(v.REJECT, decision, approved=False)
        return self._receipt(decision.step_id, "rejected", why)

    @reject_now.validator
    def _check_reject(self, decision: ApprovalDecision) -> None:
        decisions.refuse(decisions.approval_refusal(self.s, decision))

    @workflow.update(name=v.RESOLVE)
    async def resolve_now(self, resolution: Resolution) -> Receipt:
        """Resolve an unclear effect, and answer the sender once it is recorded."""
        why = await self.gates.resolve(resolution)
        return self._receipt(resolution.step_id, resolution.action, why)

    @resolve_now.validator
    def _check_resolve(self, resolution: Resolution) -> None:
        decisions.refuse(decisions.resolution_refusal(self.s, resolution))

    # --- approval policy (waypoint/workflows/policy.py) -------------------------------------

    @workflow.update(name=v.SET_POLICY)
    async def set_policy_now(self, change: PolicyChange) -> Receipt:
        """Put a new approval policy in force for the rest of the run, recorded in the ledger."""
        return await self._set_policy(change)

    @set_policy_now.validator
    def _check_set_policy(self, change: PolicyChange) -> None:
        decisions.refuse(self.loading or policy.change_refusal(change))

    @workflow.signal(name=v.SET_POLICY)
    async def set_policy(self, raw: RawValue) -> None:
        """The same change as a signal, for when no worker is up; a bad one is recorded."""
        change = self._decode(v.SET_POLICY, raw, PolicyChange)
        if change is not None:
            await self._set_policy(change)

    async def _set_policy(self, change: PolicyChange) -> Receipt:
        receipt = await policy.apply(self.s, self.gates, change)
        self._publish()
        return receipt

    # --- answers to client-answered tools (workflows/answers.py) -----------------------------

    @workflow.signal(name=v.ANSWER)
    def answer(self, raw: RawValue) -> None:
        """Answer a client tool's pending call (for when no worker is up)."""
        given = self._decode(v.ANSWER, raw, ClientAnswer)
        if given is not None:
            self.tools.answers.receive(v.ANSWER, given)

    @workflow.update(name=v.ANSWER)
    def answer_now(self, given: ClientAnswer) -> Receipt:
        """Answer a client tool's pending call, and tell the sender once it is recorded."""
        self.tools.answers.receive(v.ANSWER, given)
        return self._receipt(given.step_id, "answered")

    @answer_now.validator
    def _check_answer(self, given: ClientAnswer) -> None:
        decisions.refuse(answers.refusal(self.s, given))

    # ------------------------------------------------------------------------------------------

    @workflow.signal(name=v.CORRECT)
    def correct(self, raw: RawValue) -> None:
        """Replace a recorded tool result or leave a note; the next model step sees it."""
        correction = self._decode(v.CORRECT, raw, Correction)
        if correction is None:
            return
        why, _ = self._correct(correction)
        if why:
            self.gates.ignore(v.CORRECT, correction.step_id or "", why)
        self._publish()

    @workflow.update(name=v.CORRECT)
    def correct_now(self, correction: Correction) -> Receipt:
        """Correct, and answer the sender once the correction is recorded."""
        why, step_id = self._correct(correction)
        decisions.refuse(why)  # the validator has just said yes
        self._publish()
        return self._receipt(step_id, "corrected")

    @correct_now.validator
    def _check_correct(self, correction: Correction) -> None:
        if decisions.seen(self.s, correction.decision_id):
            return  # a repeat: a recorded no-op
        why = operator.correction_refusal(self.s, correction, self.model.folding)
        decisions.refuse(self.loading or why)  # a fork's state would replace what it changed

    # --- steering (workflows/steering.py) ---------------------------------------------------

    @workflow.signal(name=v.STEER)
    def steer(self, raw: RawValue) -> None:
        """A person's message for the agent, for when no worker is up; a refusal is recorded."""
        self.steering.signal(self._decode(v.STEER, raw, Steer))

    @workflow.update(name=v.STEER)
    def steer_now(self, steer: Steer) -> Receipt:
        """Deliver a message at the next safe point; the receipt says where it goes."""
        return self.steering.update(steer)

    @steer_now.validator
    def _check_steer(self, steer: Steer) -> None:
        decisions.refuse(self.loading or self.steering.refusal(steer))

    @workflow.signal(name=v.RAISE_LIMITS)
    def raise_limits(self, raw: RawValue) -> None:
        """Replace the run's limits, e.g. to let a parked run continue."""
        limits = self._decode(v.RAISE_LIMITS, raw, Limits)
        if limits is not None and operator.raise_limits(self.s, self.gates, limits):
            self._limits_before_spec = self.s.spec is None
            if self.s.spec is not None:
                self._publish()

    # --- pause (workflows/operator.py `hold`, gates.py `held`) --------------------------------

    @workflow.signal(name=v.PAUSE)
    async def pause(self, raw: RawValue) -> None:
        """Hold the run before its next step (for when no worker is up)."""
        if (hold := self._decode(v.PAUSE, raw, Hold)) is not None:
            await self._hold(v.PAUSE, hold)

    @workflow.update(name=v.PAUSE)
    async def pause_now(self, hold: Hold) -> Receipt:
        """Hold the run before its next step; its approvals still wait and can be decided."""
        return await self._hold(v.PAUSE, hold)

    @pause_now.validator
    def _check_pause(self, hold: Hold) -> None:
        decisions.refuse(self.loading or operator.hold_refusal(self.s, v.PAUSE, hold))

    @workflow.signal(name=v.UNPAUSE)
    async def unpause(self, raw: RawValue) -> None:
        """Let a paused run go on where it stopped (for when no worker is up)."""
        if (hold := self._decode(v.UNPAUSE, raw, Hold)) is not None:
            await self._hold(v.UNPAUSE, hold)

    @workflow.update(name=v.UNPAUSE)
    async def unpause_now(self, hold: Hold) -> Receipt:
        """Let a paused run go on where it stopped."""
        return await self._hold(v.UNPAUSE, hold)

    @unpause_now.validator
    def _check_unpause(self, hold: Hold) -> None:
        decisions.refuse(self.loading or operator.hold_refusal(self.s, v.UNPAUSE, hold))

    async def _hold(self, name: str, hold: Hold) -> Receipt:
        receipt = await operator.hold(self.s, self.gates, name, hold)
        self._publish()
        return receipt

    @workflow.signal(name=v.RESUME)
    def resume(self, raw: RawValue) -> None:
        """Retry a parked step; for one in `tool_changed`, `replan` tells the model instead."""
        if (request := self._decode(v.RESUME, raw, ResumeRequest)) is not None:
            self.gates.resume(request)

    # --- bookkeeping ------------------------------------------------------------------------

    def _decode(self, signal: str, raw: RawValue, kind: type[T]) -> T | None:
        """A signal's payload as `kind`, or None with the reason recorded: never a lost signal."""
        value, why = decisions.decode(signal, raw, kind, self.s.spec)
        if value is not None and self.loading:
            value, why = None, self.loading
        if why:
            self.gates.ignore(signal, "", why)
            self._publish()
        return value

    def _correct(self, correction: Correction) -> tuple[str, str]:
        return operator.correct_once(self.s, self.gates, correction, self.model.folding)

    def _receipt(self, step_id: str, decision: str, refused: str = "") -> Receipt:
        return decisions.receipt(self.s, step_id, decision, refused)

    def _publish(self) -> None:
        """Stream what changed, and mirror the state where people and `describe` look."""
        self.events.sync()
        self.visibility.publish()
