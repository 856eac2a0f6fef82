"""`AgentWorkflow`: the agent loop as a deterministic Temporal workflow.

model step -> the tool calls it asked for (in parallel) -> tool results -> next model step,
until the model ends its turn. Steps live in `steps.py`, waits for people in `gates.py`, the
queries in `queries.py`, each verb's signal and Update made in `handlers.py`; this module holds
the loop and what each verb does. No I/O, clock or randomness here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import BaseModel
from temporalio import workflow
from temporalio.common import RawValue

with workflow.unsafe.imports_passed_through():
    from waypoint.protocol import (
        AgentState,
        Correction,
        Message,
        Receipt,
        RunInput,
        RunResult,
        TextBlock,
        ToolUseBlock,
    )
    from waypoint.protocol import verbs as v
    from waypoint.protocol.handover import OpenWait
    from waypoint.protocol.verbs import LimitsChange
    from waypoint.protocol.vocabulary import MAX_TOKENS, REFUSAL

from waypoint._workflows import (
    answers,
    budget,
    cancel,
    children,
    decisions,
    forks,
    handlers,
    operator,
    policy,
    replan,
    simple,
)
from waypoint._workflows.carry import Carry
from waypoint._workflows.events import RunEvents
from waypoint._workflows.gates import Gates
from waypoint._workflows.history_meter import HistoryMeter
from waypoint._workflows.model_steps import ModelSteps
from waypoint._workflows.output import OutputSteps
from waypoint._workflows.queries import Queries
from waypoint._workflows.steps import Steps
from waypoint._workflows.tool_steps import ToolSteps
from waypoint._workflows.visibility import Visibility

T = TypeVar("T", bound=BaseModel)
ADMITTED = {v.APPROVE, v.REJECT, v.RESOLVE, v.SET_POLICY, *simple.SIMPLE}
"""Verbs whose own path checks the signature as it applies them (`Gates.admit`)."""


@workflow.defn(name="AgentWorkflow")
@handlers.made  # a signal, an Update and its validator per verb, from VERBS
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
        self._early: list[LimitsChange] | None = [] if self.s.spec is None else None
        """`raise_limits` sent before the spec (with the start), each judged once it loads."""
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
            s.limits = s.limits or s.spec.limits
            if input.limits_override is not None:  # set at start: each over the agent's own
                before, s.limits = s.limits, input.limits_override.over(s.limits)
                operator.limits_set(s, before, "limits set at start")
            await self._early_limits()
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
            if self.handover.model is None:  # else handed over in a model step: it goes on
                await self.gates.before_step(OpenWait(kind="paused"))  # held: no step till let go
                await self.gates.within_limits(note=OpenWait(kind="limit"))
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

    # --- verbs: each one's signal, Update and validator are made from VERBS (handlers.py) ----

    def refusal(self, name: str, p: Any) -> str:
        """An Update's validator: why verb `name` cannot apply now, or '' (a repeat is a no-op)."""
        s = self.s
        if name in (v.APPROVE, v.REJECT):
            return decisions.approval_refusal(s, p)
        if name == v.RESOLVE:
            return decisions.resolution_refusal(s, p)
        if name == v.ANSWER:
            return answers.refusal(s, p)
        if name == v.CORRECT and decisions.seen(s, p.decision_id):
            return ""
        if self.loading:  # a fork's state would replace what it changed
            return self.loading
        if name == v.CORRECT:
            return operator.correction_refusal(s, p, self.model.folding)
        if name == v.STEER:
            return self.steering.refusal(p)
        if name == v.SET_POLICY:
            return policy.change_refusal(p)
        return operator.simple_refusal(s, name, p)

    async def apply(self, name: str, p: Any, answer: bool) -> Receipt:
        """Apply verb `name` once, signed where the agent asks; a refusal is recorded, not raised.

        `answer`: it came as an Update, whose sender waits for the receipt.
        """
        s, done = self.s, v.HANDLERS[name].done
        step_id = str(getattr(p, "step_id", "") or "")
        why = await self._unsigned(name, step_id, p)
        if why:
            return self._receipt(step_id, done, why)
        if name in (v.APPROVE, v.REJECT):
            why = await self.gates.apply_approval(name, p, approved=name == v.APPROVE)
            receipt = self._receipt(step_id, done, why)
            fate = answer and name == v.APPROVE and not why  # did the approved call run?
            return await self.tools.gate.fate(receipt) if fate else receipt
        if name == v.RESOLVE:
            return self._receipt(step_id, p.action, await self.gates.resolve(p))
        if name == v.ANSWER:
            return self._receipt(step_id, done, self.tools.answers.receive(name, p))
        if name == v.STEER:
            return self.steering.update(p) if answer else self.steering.signal(p)
        if name == v.RESUME:
            self.gates.resume(p)
            return self._receipt("", done)
        if name == v.RAISE_LIMITS:
            self._raise_limits(p)
            return self._receipt("", done)
        if name == v.CORRECT:
            why, step_id = self._correct(p)
            if why:
                self.gates.ignore(v.CORRECT, p.step_id or "", why)
            receipt = self._receipt(step_id, done, why)
        elif name == v.SET_POLICY:
            receipt = await policy.apply(s, self.gates, p)
        else:
            receipt = await operator.simple_verb(s, self.gates, name, p)
        self._publish()
        return receipt

    async def _unsigned(self, name: str, step_id: str, p: Any) -> str:
        """Why a verb whose own path does not check signatures is refused unsigned, or ''.

        Every verb but two waits for the spec first, which says whether the agent takes signed
        decisions only (before it, an unsigned pause would pass), and is refused while a fork
        loads (whose state would replace what it changed). `raise_limits` sent before the spec
        is checked once it has loaded; a `resume` of a spec that failed to load goes unchecked:
        it can only load it again. Approve, reject, resolve, set_policy and the simple verbs
        then check theirs as they apply (`Gates.admit`).
        """
        if name == v.RAISE_LIMITS and self._early is not None:
            return ""  # judged in turn with those sent before the spec (`_early_limits`)
        if self.s.spec is None:
            if name == v.RESUME:
                return ""
            await workflow.wait_condition(lambda: self.s.spec is not None or bool(self.loading))
            if self.loading:
                self.gates.ignore(name, step_id, self.loading)
                return self.loading
        if name in ADMITTED:
            return ""
        why = await self.gates.signature_refusal(name, step_id, p)
        if why:
            self.gates.ignore(name, step_id, why)
            self._publish()
        return why

    def _raise_limits(self, change: LimitsChange) -> None:
        """Put the limits in force; before the spec, kept until its checks can be made."""
        if self._early is not None:
            self._early.append(change)
        elif operator.raise_limits(self.s, self.gates, change.limits()):
            self._publish()

    async def _early_limits(self) -> None:
        """Judge each `raise_limits` sent before the spec on its own, in the order they came.

        A refused one is an ignored line and changes nothing: it neither replaces nor undoes
        one that came before it. One sent while these are judged waits its turn behind them.
        """
        while self._early:
            given = self._early.pop(0)
            why = await self.gates.signature_refusal(v.RAISE_LIMITS, "", given)
            if why:
                self.gates.ignore(v.RAISE_LIMITS, "", why)  # refused, not the run failed
            else:
                operator.raise_limits(self.s, self.gates, given.limits())  # or refused unpriced
        self._early = None

    # --- bookkeeping ------------------------------------------------------------------------

    def decode(self, signal: str, raw: RawValue, kind: type[T]) -> T | None:
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
