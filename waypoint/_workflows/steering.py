"""Steering: a person's message delivered to the running agent at the next safe point.

`waypoint steer RUN "message"` arrives as an Update (the sender gets a receipt, or the refusal
and why) or, with no worker up, as a signal (a refusal is recorded under `ignored_signals`).
Either way it becomes an operator step in the ledger (`tN.operator.K`, tool `steer`, who and
when) and waits in `AgentState.steers` until a model step reads it:
- a model step in flight is cancelled. What it spent is recorded on its own ledger line
  (status `cancelled`, costed; "tokens unknown" when its provider could not say), and the step
  is asked again (`tN.model.s1`) with the message appended;
- tool calls in flight finish (or reconcile, or wait for their approval) first: the message
  goes to the model with their results;
- a reply that ended the turn as the steer arrived does not end the run: the model reads the
  message and goes on. A run that ends anyway (a final typed answer, a refusal, a reply at
  the last turn `max_turns` allows, a cancel) leaves a steer undelivered, and its ledger line
  says so;
- the steers waiting for a model step are inside its budget reservation (`budget`): steers
  that do not fit park the run in `limit_reached`, saying so, until the limits are raised;
- a steer sent once the run is cancelled, or ending, is refused: no receipt promises a model
  step that will not come.
Deterministic code only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from waypoint.protocol import (
        AgentState,
        Limits,
        Message,
        ModelRequest,
        ModelResponse,
        PartialSpend,
        PendingSteer,
        Receipt,
        Steer,
        StepRecord,
        TextBlock,
    )
    from waypoint.protocol.hashing import keyed_sha256_hex
    from waypoint.protocol.states import CALL_STATES, FINAL_STATES, PARKED_STATES, STEP_WAITING
    from waypoint.protocol.verbs import STEER, STEER_MAX_CHARS

from waypoint._workflows import cancel, decisions, operator
from waypoint._workflows.gates import Gates
from waypoint._workflows.steps import asked_again


class Interrupted(Exception):
    """A steer cancelled the model step in flight; what the step spent, as far as known."""

    def __init__(self, steer: str, spent: PartialSpend | None, how: str) -> None:
        super().__init__(f"cancelled by steer {steer}")
        self.steer = steer
        self.spent = spent
        self.how = how


class Steering:
    """Takes steers in, cuts the model step in flight, and puts the messages in the transcript."""

    def __init__(self, s: AgentState, gates: Gates, publish: Callable[[], None]) -> None:
        self.s = s
        self.gates = gates
        self.publish = publish
        self._call: workflow.ActivityHandle[ModelResponse] | None = None
        self._step = ""
        """The model step in flight, which a steer cancels."""
        self._cut = ""
        """The steer that cancelled it."""
        self._during: list[str] = []
        """Every steer that came while it was in flight."""
        self._closed = False
        """Steers are no longer taken: the run is ending."""
        self._unread = ""
        """Why the waiting steers will not be read, once the loop has decided the run ends."""

    # --- what a person sends ----------------------------------------------------------------

    def refusal(self, steer: Steer) -> str:
        """Why this steer cannot apply, or '' when it can (a repeat is a recorded no-op)."""
        s = self.s
        if decisions.seen(s, steer.decision_id):
            return ""
        if not steer.message.strip():
            return "an empty message: say what the agent should know or do"
        if len(steer.message) > STEER_MAX_CHARS:
            return f"the message has {len(steer.message):,} characters; at most {STEER_MAX_CHARS:,}"
        if s.state in FINAL_STATES:
            return f"the run has ended ({s.state}): nothing to steer"
        if workflow.cancellation_reason() is not None:
            return "the run is being cancelled: no model step is left to read the message"
        if self._closed:
            return "the run is ending: nothing to steer"
        return ""

    def update(self, steer: Steer) -> Receipt:
        """Apply a steer sent as an Update; the receipt says what happens next."""
        why, step_id, detail = self._apply(steer)
        self.publish()
        if why:  # the validator said yes a moment ago; refused all the same, never raised
            return decisions.receipt(self.s, "", "steered", why)
        done = decisions.receipt(self.s, step_id, "steered")
        return done.model_copy(update={"detail": detail})

    def signal(self, steer: Steer) -> Receipt:
        """Apply a steer sent as a signal (no worker was up); a refusal is recorded."""
        why, step_id, _ = self._apply(steer)
        if why:
            self.gates.ignore(STEER, "", why)
        self.publish()
        return decisions.receipt(self.s, step_id, "steered", why)

    def _apply(self, steer: Steer) -> tuple[str, str, str]:
        """Record a steer once (by its decision id): why not, or its operator step and detail."""
        s = self.s
        if self.gates.repeated(STEER, "", steer):
            return "", s.decision_ids[steer.decision_id], "a repeat: the message goes once"
        why = self.refusal(steer)
        if why:
            return why, "", ""
        step_id = f"t{s.turn}.operator.{sum(r.kind == 'operator' for r in s.ledger) + 1}"
        where, detail = self._what_next()
        salt = s.spec.hash_salt if s.spec is not None else ""
        words = " ".join(steer.message.split())
        s.ledger.append(
            StepRecord(
                step_id=step_id,
                kind="operator",
                tool=STEER,
                input_hash=keyed_sha256_hex(salt, steer.message),
                status="completed",
                summary=f"steer, {where}: {words}"[:160],
            )
        )
        decisions.stamp(s, step_id, decisions.who(steer.reviewer, steer.identity))
        self.gates.applied(steer.decision_id, step_id)
        text = f"Message from {steer.reviewer}, who is steering this run: {steer.message}"
        s.steers.append(PendingSteer(step_id=step_id, text=text))
        if self._call is not None:
            self._during.append(step_id)
            if not self._cut:
                self._cut = step_id
                self._call.cancel()
        return "", step_id, detail

    def _what_next(self) -> tuple[str, str]:
        """Where the message goes (the step it cancels, the calls it waits for), short and whole."""
        s = self.s
        if self._call is not None:
            step, last = self._step, self.last_turn()
            detail = f"{step} was in flight: cancelled, and asked again with it"
            if last:  # its answer may come before the cancel reaches it, and end the run
                detail += f" (should it answer first, {last})"
            return f"cancels {step}", detail
        if s.tool_changed:  # parked: nothing runs, and nothing reaches the model, until resume
            calls = ", ".join(s.tool_changed)
            return (
                f"after {calls}, parked in tool_changed",
                f"{calls} parked in tool_changed: the message goes to the model with their "
                "results once `waypoint resume` moves them on (after a rollback they run first)",
            )
        running = [r.step_id for r in s.ledger if r.kind == "tool" and r.status in STEP_WAITING]
        if running:
            calls = ", ".join(running)
            return f"after {calls}", f"goes to the model with the results of {calls}"
        if s.state in PARKED_STATES - CALL_STATES:
            return (
                f"parked in {s.state}",
                f"the run is parked ({s.state}): goes to the model when it goes on",
            )
        if self.last_turn():  # whatever runs now may end the run: say so, promise nothing
            return (
                "for the next model step",
                f"goes to the model at its next step, if the run has one: {self.last_turn()}",
            )
        return "for the next model step", "goes to the model at its next step"

    # --- the model step a steer cuts --------------------------------------------------------

    async def call(self, activity: str, request: ModelRequest, **options: Any) -> ModelResponse:
        """Run a turn's model call so that a steer can cancel it and learn what it spent.

        A compaction's call runs as any activity.
        """
        if request.purpose != "turn":
            return await cancel.execute(activity, request, **options)
        # Wait for the cancelled call to report: it says what it spent before it stopped.
        wait = workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED
        self._call = workflow.start_activity(activity, request, cancellation_type=wait, **options)
        self._step, self._cut, self._during = request.step_id, "", []
        try:
            # An answer that comes with the run's cancel is kept.
            response = await cancel.settled(self._call)
            # It answered before the cancel reached it: the next model step reads the steers.
            was, now = f"cancels {self._step}", f"{self._step} answered first"
            for record in (r for r in self.s.ledger if r.step_id in self._during):
                record.summary = record.summary.replace(was, now, 1)[:160]
            return response
        except ActivityError as err:
            if workflow.cancellation_reason() is not None:
                raise  # the model step records what the call spent, then the run ends
            if not self._cut:
                raise
            raise Interrupted(self._cut, *cancel.spent(err)) from err
        finally:
            self._call, self._step, self._cut, self._during = None, "", "", []

    def account(self, record: StepRecord, cut: Interrupted) -> str:
        """Record the cancelled call and add what it cost; returns the step that asks again."""
        s, spent = self.s, cut.spent
        record.status = "cancelled"
        if spent is None:
            s.cost_known = False
            record.summary = f"cancelled by steer {cut.steer}: tokens unknown ({cut.how})"[:160]
        else:
            tokens = spent.usage.total
            record.attempt, record.tokens, record.cost_usd = spent.attempt, tokens, spent.cost_usd
            s.total_tokens += tokens
            what = f"{tokens:,} tokens"
            if not spent.known:
                what += " reported, the rest unknown; cost unknown"
            elif spent.cost_usd is None:
                what += "; cost unknown (the model has no price)"
            else:
                what += f", ${spent.cost_usd:.4f}"
            if spent.cost_usd is None:
                s.cost_known = False
            else:
                s.cost_usd += spent.cost_usd
            record.summary = f"cancelled by steer {cut.steer}: {what}"[:160]
        self.publish()
        return asked_again(record.step_id, "s")

    def supersede(self, record: StepRecord) -> str:
        """A parked step steered meanwhile: it is closed, and asked again with the steer."""
        record.status = "error"
        return asked_again(record.step_id, "s")

    # --- delivery -----------------------------------------------------------------------------

    def waiting(self) -> bool:
        """Whether accepted steers wait for a model step."""
        return bool(self.s.steers)

    def goes_on(self) -> bool:
        """Whether waiting steers keep going a run whose model ended its turn.

        They do while `max_turns` leaves a turn to read them; at the last turn the run ends
        with the answer it has, and the steers' lines say they were not delivered.
        """
        if not self.s.steers:
            return False
        self._unread = self.last_turn()
        return not self._unread

    def last_turn(self) -> str:
        """Why no model turn is left after this one (`max_turns`), or ''."""
        limits = self.s.limits or Limits()
        if self.s.turn < limits.max_turns:
            return ""
        return f"max_turns={limits.max_turns} leaves no turn to read it"

    def deliver(self) -> None:
        """Put waiting steers in the transcript, just before a model step reads it."""
        s = self.s
        if not s.steers:
            return
        said = [TextBlock(text=p.text) for p in s.steers]
        last = s.messages[-1]
        if last.role == "user":
            s.messages[-1] = Message(role="user", content=[*last.content, *said])
        else:  # after a continued answer: the person speaks next
            s.messages.append(Message(role="user", content=[*said]))
        s.steers = []
        operator.rehash(s)

    def undelivered(self, why: str = "") -> None:
        """The run ends: steers are refused from now on, and unread ones say so in the ledger.

        `why` they were not read; by default what `goes_on` found, else the run ended first.
        """
        why = why or self._unread or "the run ended first"
        self._closed = True
        if not self.s.steers:
            return
        for pending in self.s.steers:
            for record in (r for r in self.s.ledger if r.step_id == pending.step_id):
                record.status = "error"
                record.summary = f"not delivered: {why}. {record.summary}"[:160]
        self.s.steers = []
        self.publish()
