"""Whether a history segment has reached its budget, asked of the server as seldom as is safe.

`workflow.info()`'s history length and size are those of the workflow task an activation
belongs to, and which task an event lands in can differ between a live run and its replay (a
task that timed out on a dead worker's sticky queue, after an update): a continue-as-new
decided from them did not replay (torture seed 90101). So the segment asks the server through
`waypoint.history_size`, whose answer replays from its event, and only once the steps since
its last answer could have filled the budget, and at least every `ASK_EVERY` steps.
Deterministic code only.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from waypoint.protocol import HistoryLimits
    from waypoint.protocol.spec import HistorySize

from waypoint.workflows.steps import Steps

EVENTS_PER_STEP = 16
"""More events than a ledger step brings with its tasks and messages (6 to 13 in the golden
histories), so a budget is never passed unasked by counting steps."""
ASK_EVERY = 25
"""Steps between two answers at most: one step may bring far more bytes than the average."""
BYTES_PER_STEP = 32 * 1024
"""A step's bytes until the server has answered once; then twice the average since."""
ASK_TIMEOUT = timedelta(seconds=10)


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
        self.size = await workflow.execute_activity(
            "waypoint.history_size",
            result_type=HistorySize,
            activity_id=f"t{self.s.turn}.history_size",
            task_queue=self.steps.agent_queue(),
            start_to_close_timeout=ASK_TIMEOUT,
            heartbeat_timeout=self.s.input.options.tool_heartbeat_timeout,
            summary="history size (continue-as-new?)",
        )
        self._steps_in += len(self.s.ledger) - self._steps_at
        self._steps_at = len(self.s.ledger)
        return self.size.events >= budget.max_events or self.size.bytes >= budget.max_bytes
