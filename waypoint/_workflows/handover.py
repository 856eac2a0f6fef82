"""A waiting run continues-as-new when its history budget is reached. Deterministic code only.

A run waiting for a person takes signals and updates all the while (steers, refused or repeated
decisions, pauses), each adding events; a week of them would walk it to Temporal's 51,200-event
limit, where it is terminated. So each wait that can be handed over races its decision against
the budget, metered by the recorded `waypoint.history_size` step as between turns
(`history_meter.py`). Once every call of the reply in progress is finished or waits (or the run
waits between turns), and the server says the budget is reached, the run drains its handlers and
continues-as-new with the turn in `AgentState.waiting_turn`: the reply's calls, the results of
the finished ones, and each open wait with its deadline and reminders. The next segment runs the
same calls again: finished ones answer from the carried results, waiting ones re-enter their
wait on their carried ledger line, pending approval or question (same step id, arguments hash,
`requested_at` and deadline), without preparing or judging again what was judged. A decision
that arrives while handlers drain wins: the handover is called off and the turn goes on.

Parks hand over the same way (`OpenWait.kind`): a call whose effect waits for an operator's
`resolve` goes straight back to that wait, its effect not run again; a call whose tool changed
goes back to its `tool_changed` park; a call held by a pause is held again, an approval it had
carried. A model step parked in an outage (or held by a pause before its call, or after an
answer that fills the context window, or waiting for its summary step parked in an outage:
`OpenWait.compact`) is taken up at that step of its turn (`model_steps.py`): the steps before
it are not asked again, and nothing is called until `resume` (or `unpause`) comes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine
from datetime import datetime, timedelta
from typing import Any, Protocol

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from waypoint.protocol import (
        AgentState,
        ContentBlock,
        HistoryLimits,
        Limits,
        StepRecord,
        ToolPreparation,
        ToolResultBlock,
        ToolUseBlock,
    )
    from waypoint.protocol.handover import MODEL_WAITS, RUN_WAITS, OpenWait, WaitingTurn


class Meter(Protocol):
    """What a waiting run asks of `history_meter.Meter`."""

    def waiting_may_be_full(self, budget: HistoryLimits) -> bool: ...  # noqa: D102

    async def waiting_full(self, budget: HistoryLimits) -> bool: ...  # noqa: D102


Hand = Callable[[Callable[[], bool]], Awaitable[None]]
"""Continues-as-new with the state as it is, once handlers drained while `still()` holds;
returns if it stopped holding first."""
Turn = tuple[list[ToolUseBlock], list[ContentBlock], bool]


async def wait_until(done: Callable[[], bool], until: datetime | None) -> bool:
    """Wait for `done` until `until` (None: for ever); False if it passed first."""
    timeout = None if until is None else until - workflow.now()
    if timeout is not None and timeout <= timedelta(0):
        return done()
    try:
        await workflow.wait_condition(done, timeout=timeout)
    except TimeoutError:
        return False
    return True


class Handover:
    """The run's waits in progress, raced against its history budget."""

    def __init__(self, s: AgentState) -> None:
        self.s = s
        self.carried, s.waiting_turn = s.waiting_turn, None
        """The turn the previous segment handed over while it waited, if it did."""
        self._carried = {w.step_id: w for w in self.carried.waits} if self.carried else {}
        waits = self._carried.values()
        self.model = next((w for w in waits if w.kind in MODEL_WAITS and w.step_id), None)
        """A model step that waited at the handover: the next turn is taken up there."""
        self.summary = next((w for w in waits if w.compact and not w.step_id), None)
        """The summary step before a continue-as-new, parked at the handover (`compacting.py`)."""
        self.first: Callable[[], Awaitable[object]] | None = None
        """What the run takes up before its first step: that summary, parked again."""
        self._taken: set[tuple[str, str]] = set()
        """What of a carried call was taken: its ledger line, its arguments, its wait."""
        self.meter: Meter | None = None
        self._hand: Hand | None = None
        self.turn: Turn | None = None
        """The reply whose calls are running."""
        self.open = 0
        """Calls of that reply started and not finished."""
        self.results: dict[int, ToolResultBlock] = (
            dict(self.carried.results) if self.carried else {}
        )
        self.waits: dict[str, tuple[OpenWait, Callable[[], bool]]] = {}
        self.judges: dict[str, Any] = {}
        """Each call's `tool_gate.Judged`, by step id: what the gate decided so far."""
        self._busy = False

    def attach(self, meter: Meter, hand: Hand) -> None:
        """Meter the waits from now on; `hand` continues-as-new."""
        self.meter, self._hand = meter, hand

    # --- the turn in progress -----------------------------------------------------------------

    def resumed_turn(self) -> Turn | None:
        """The reply the previous segment handed over as its calls waited, to go on with."""
        c = self.carried
        return (c.calls, c.feedback, c.cut_off) if c is not None and c.calls else None

    def begin(self, calls: list[ToolUseBlock], feedback: list[ContentBlock], cut_off: bool) -> None:
        """The reply's calls start (or go on, in a resumed turn)."""
        self.turn = (calls, feedback, cut_off)

    def end(self) -> None:
        """The reply's calls are all answered: nothing of it is carried any more."""
        self.turn, self.results, self.judges = None, {}, {}
        self.carried, self._carried, self._taken = None, {}, set()

    async def call(self, index: int, run: Coroutine[Any, Any, ToolResultBlock]) -> ToolResultBlock:
        """Run the reply's `index`th call, or answer it from before the handover."""
        if index in self.results:
            run.close()
            return self.results[index]
        self.open += 1
        try:
            block = await run
        finally:
            self.open -= 1
        self.results[index] = block
        return block

    def carried_record(self, step_id: str) -> StepRecord | None:
        """The ledger line of a call that was waiting at the handover: the step goes on."""
        if step_id not in self._carried or ("record", step_id) in self._taken:
            return None
        self._taken.add(("record", step_id))
        return next((r for r in reversed(self.s.ledger) if r.step_id == step_id), None)

    def judged(self, step_id: str, judged: Any) -> Any:
        """The gate's record for the call (`tool_gate.Judged`), as carried if it was waiting."""
        if (w := self._carried.get(step_id)) is not None and step_id not in self.judges:
            judged.route, judged.approved = w.route, w.approved
        self.judges[step_id] = judged
        return judged

    def prepared(self, step_id: str) -> ToolPreparation | None:
        """A waiting call's checked arguments, as the wait holds them: not prepared again."""
        w, s = self._carried.get(step_id), self.s
        if w is None or ("prep", step_id) in self._taken:
            return None
        self._taken.add(("prep", step_id))
        if w.kind == "approval" and step_id in s.pending:
            return ToolPreparation(
                valid=True, needs_approval=True, arguments=s.pending[step_id].arguments
            )
        if w.kind == "answer" and step_id in s.questions:
            return ToolPreparation(valid=True, arguments=s.questions[step_id].arguments)
        if w.prepared is not None:  # held or unclear: as it was checked
            return ToolPreparation.model_validate(w.prepared)
        return None

    def changed_tool_parked(self) -> bool:
        """Whether a call parked on a changed tool was handed over: its reply goes back to it.

        Not to a wait for `unpause` first, so a `resume` sent meanwhile finds the park (a pause
        still holds each call on its own, `ToolSteps.tool`).
        """
        return any(w.kind == "tool_changed" for w in self._carried.values())

    def parked(self, step_id: str) -> OpenWait | None:
        """The call's park at the handover (`resolution`, `tool_changed`): it goes straight back."""
        w = self._carried.get(step_id)
        parks = ("resolution", "tool_changed")
        if w is None or w.kind not in parks or ("park", step_id) in self._taken:
            return None
        self._taken.add(("park", step_id))
        return w

    def model_wait(self) -> OpenWait | None:
        """The model step that waited at the handover, once: its turn goes on there."""
        w, self.model = self.model, None
        return w

    # --- waits --------------------------------------------------------------------------------

    def note(self, step_id: str, kind: str) -> OpenWait:
        """The wait of `step_id` as the handover carried it, or a new one."""
        carried = self._carried.get(step_id)
        if carried is not None and carried.kind == kind and ("wait", step_id) not in self._taken:
            self._taken.add(("wait", step_id))
            return carried.model_copy()
        return OpenWait(kind=kind, step_id=step_id)  # type: ignore[arg-type]

    async def wait_for(self, done: Callable[[], bool], note: OpenWait, length: object) -> bool:
        """Wait for `done` for `length` (a carried wait: until its own end); False if it passed."""
        until = datetime.fromisoformat(note.until) if note.until else None
        until = until or (workflow.now() + length if isinstance(length, timedelta) else None)
        note.until = until.isoformat() if until is not None else ""
        try:
            return await self.wait(done, until, note)
        finally:
            note.until = ""

    async def until(self, done: Callable[[], bool], note: OpenWait | None) -> None:
        """Wait for `done`; with a `note`, the wait may be handed over (nothing half done)."""
        if note is not None:
            await self.wait(done, None, note)
        else:
            await workflow.wait_condition(done)

    async def wait(self, done: Callable[[], bool], until: datetime | None, note: OpenWait) -> bool:
        """Wait for `done` until `until`, handing the run over if its budget is reached first."""
        self.waits[note.step_id] = (note, done)
        try:
            while True:
                if await wait_until(lambda: done() or self._may_be_full(), until):
                    if done():
                        return True
                    await self._try()
                else:
                    return done()
        finally:
            self.waits.pop(note.step_id, None)

    def ready(self) -> bool:
        """Whether nothing is half done: every started call waits, or the run itself waits.

        A call running a tool, a child or a reminder has work in flight that a handover would
        abandon; it is waited for. So is a run whose continue-as-new budget is spent. The run's
        own wait (`RUN_WAITS`: between turns, in a model step, before a reply's calls) is
        handed over only when it is the only thing going on.
        """
        if not self.waits or any(done() for _, done in self.waits.values()):
            return False
        if self.s.continues >= (self.s.limits or Limits()).max_continue_as_new:
            return False
        if any(note.kind in RUN_WAITS for note, _ in self.waits.values()):
            return len(self.waits) == 1 and self.open == 0
        return self.turn is not None and len(self.waits) == self.open

    def _may_be_full(self) -> bool:
        meter = self.meter
        budget = self.s.history_budget()
        return (
            meter is not None
            and not self._busy
            and meter.waiting_may_be_full(budget)
            and self.ready()
        )

    async def _try(self) -> None:
        """Ask the server; at the budget, hand over unless a decision came meanwhile."""
        assert self.meter is not None and self._hand is not None
        self._busy = True
        try:
            if not await self.meter.waiting_full(self.s.history_budget()) or not self.ready():
                return
            self.s.waiting_turn = self._snapshot()
            await self._hand(self.ready)
            self.s.waiting_turn = None  # called off: something was decided while draining
        finally:
            self._busy = False

    def _snapshot(self) -> WaitingTurn:
        calls, feedback, cut_off = self.turn or ([], [], False)
        waits = []
        for note, _ in self.waits.values():
            j = self.judges.get(note.step_id)
            seen = {"route": j.route, "approved": j.approved} if j is not None else {}
            if j is not None and j.prep is not None and note.kind in ("held", "resolution"):
                seen["prepared"] = j.prep.model_dump(mode="json")
            waits.append(note.model_copy(update=seen))
        for step_id, w in self._carried.items():  # calls not started again yet: still carried
            if w.kind not in RUN_WAITS and ("record", step_id) not in self._taken:
                waits.append(w)
        return WaitingTurn(
            calls=calls, feedback=feedback, cut_off=cut_off, results=dict(self.results), waits=waits
        )
