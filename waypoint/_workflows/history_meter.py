"""Whether a history segment has reached its budget, asked of the server as seldom as is safe.

`workflow.info()`'s history length and size are those of the workflow task an activation
belongs to, and which task an event lands in can differ between a live run and its replay (a
task that timed out on a dead worker's sticky queue, after an update): a continue-as-new
decided from them did not replay (torture seed 90101). So the segment asks the server through
`waypoint.history_size`, whose answer replays from its event, and only once the steps since
its last answer could have filled the budget, and at least every `ASK_EVERY` steps. A server
that will not answer (the worker may not describe runs) is asked no more in this segment: the
run goes on, metered by its own pessimistic estimate, and says why once under `ignored_signals`.
Deterministic code only.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError, is_cancelled_exception

with workflow.unsafe.imports_passed_through():
    from waypoint.protocol import AgentState, HistoryLimits
    from waypoint.protocol.spec import HISTORY_UNREADABLE, HistorySize

from waypoint._workflows.retries import backoff
from waypoint._workflows.steps import Steps

EVENTS_PER_STEP = 16
"""More events than a ledger step brings with its tasks and messages (6 to 13 in the golden
histories), so a budget is never passed unasked by counting steps."""
ASK_EVERY = 25
"""Steps between two answers at most: one step may bring far more bytes than the average."""
BYTES_PER_STEP = 32 * 1024
"""A step's bytes until the server has answered once; then twice the average since."""
ASK_TIMEOUT = timedelta(seconds=10)
ASK_ATTEMPTS = 3
"""A server that cannot answer in three tries is not waited for: the run goes on estimating."""
UNMETERED = "history_size"
"""The `ignored_signals` line saying the server's count could not be read, and why."""
EVENTS_PER_ARRIVAL = 8
"""More events than a signal or an update brings with its workflow task (4 and 5)."""


def arrivals(s: AgentState) -> int:
    """Signals and updates the run recorded: refused ones and applied decisions.

    Every one is recorded, one way or the other (never a lost signal), so a waiting run
    counts what reached it from its own state, which replays as it ran; what else reaches it
    (a steer, a pause) adds a ledger line, counted as a step.
    """
    return len(s.ignored_signals) + s.ignored_dropped + len(s.decision_ids)


class HistoryMeter:
    """The server's last answer about this segment, and the ledger's length when it was given."""

    def __init__(self, steps: Steps) -> None:
        self.steps = steps
        self.s = s = steps.s
        self.size = HistorySize(events=4, bytes=len(s.input.model_dump_json()))
        """Before any answer: the start event and first task, carrying the run's input."""
        self._start = self.size.bytes
        self._steps_at = len(s.ledger)
        self._steps_in = 0
        self._arrivals_at = arrivals(s)
        self._asked = 0
        self._per_step = 0
        """Bytes a step adds by the estimate, once the server cannot be asked (0: it can)."""

    def _may_be_full(self, budget: HistoryLimits) -> bool:
        steps = max(1, len(self.s.ledger) - self._steps_at)
        grown = self.size.bytes - self._start
        per_step = 2 * grown // self._steps_in if self._steps_in else BYTES_PER_STEP
        return (
            steps >= ASK_EVERY
            or self.size.events + steps * EVENTS_PER_STEP >= budget.max_events
            or self.size.bytes + steps * per_step >= budget.max_bytes
        )

    async def full(self, budget: HistoryLimits) -> bool:
        """Whether to continue-as-new: the server's count, asked when it may say so."""
        if not self._may_be_full(budget):
            return False
        await self._ask(f"t{self.s.turn}.history_size")
        return self.size.events >= budget.max_events or self.size.bytes >= budget.max_bytes

    def waiting_may_be_full(self, budget: HistoryLimits) -> bool:
        """While the run waits: whether what reached it since the last answer may fill it."""
        steps = len(self.s.ledger) - self._steps_at
        came = arrivals(self.s) - self._arrivals_at
        if steps <= 0 and came <= 0:
            return False
        per_mark = 2 * (self.size.bytes - self._start) // self._steps_in if self._steps_in else 0
        events = self.size.events + steps * EVENTS_PER_STEP + came * EVENTS_PER_ARRIVAL
        size = self.size.bytes + (steps + came) * (per_mark or BYTES_PER_STEP)
        return steps + came >= ASK_EVERY or self._over(budget, events, size)

    def _over(self, budget: HistoryLimits, events: int, size: int) -> bool:
        """Past the budget, and by this segment's growth if by bytes (see `waiting_full`)."""
        grown = size - self._start
        return events >= budget.max_events or (
            size >= budget.max_bytes and 2 * grown >= budget.max_bytes
        )

    async def waiting_full(self, budget: HistoryLimits) -> bool:
        """Whether a waiting run should hand over: its budget reached, and by this segment.

        A state that alone passes the byte budget would hand over at every check; the waiting
        run hands over only when that sheds at least half of it.
        """
        self._asked += 1
        await self._ask(f"t{self.s.turn}.history_size.w{self._asked}")
        return self._over(budget, self.size.events, self.size.bytes)

    async def _ask(self, activity_id: str) -> None:
        steps = len(self.s.ledger) - self._steps_at
        came = arrivals(self.s) - self._arrivals_at
        self.size = await self._server(activity_id) or self._estimate(steps, came)
        self._steps_in += steps
        self._steps_at = len(self.s.ledger)
        self._arrivals_at = arrivals(self.s)

    async def _server(self, activity_id: str) -> HistorySize | None:
        """The server's count; None when it cannot be had (said once, under `ignored_signals`)."""
        if self._per_step:
            return None
        opts = self.s.input.options
        try:
            return await workflow.execute_activity(
                "waypoint.history_size",
                result_type=HistorySize,
                activity_id=activity_id,
                task_queue=self.steps.agent_queue(),
                start_to_close_timeout=ASK_TIMEOUT,
                heartbeat_timeout=opts.tool_heartbeat_timeout,
                retry_policy=backoff(opts, ASK_ATTEMPTS, HISTORY_UNREADABLE),
                summary="history size (continue-as-new?)",
            )
        except ActivityError as err:
            if is_cancelled_exception(err):
                raise  # the run was cancelled while it asked: it ends, not unmetered
            grown, asked = self.size.bytes - self._start, self._steps_in
            self._per_step = max(2 * grown // asked if asked else BYTES_PER_STEP, 1)
            cause = getattr(err.cause, "message", "") or str(err.cause or err)
            why = f"history size unread, so estimated by steps (continue-as-new early): {cause}"
            if not any(i.signal == UNMETERED and i.reason == why for i in self.s.ignored_signals):
                self.steps.gates.ignore(UNMETERED, activity_id, why)  # once a run, not a turn
                self.steps.gates.publish()
            return None

    def _estimate(self, steps: int, came: int) -> HistorySize:
        """The last count grown by the steps and arrivals since, each as `_may_be_full` fears."""
        events = self.size.events + steps * EVENTS_PER_STEP + came * EVENTS_PER_ARRIVAL
        return HistorySize(events=events, bytes=self.size.bytes + (steps + came) * self._per_step)
