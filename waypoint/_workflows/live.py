"""`LiveStreamWorkflow`: one model step's live words, kept out of the run's history.

Token deltas are many and small; signalled into the run they would grow its history with
every flush (the trap peers fell into). A watched model step gets this small workflow instead,
named after the run and the step (`waypoint.protocol.events.delta_stream_id`): the first reader
to see the step open starts it, the model activity finds it and publishes to it, readers
long-poll it, and its history ends with the step. A step nobody watches has none. What a late
reader needs of a finished step is in the run's own `StepCompleted`.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.contrib.workflow_streams import WorkflowStream

LIFETIME = timedelta(hours=2)
"""A stream whose step never answered (a worker lost for good, a reader gone) ends on its own."""
CLOSE = "close"
"""Signal: the step's answer is complete; end once readers have drained."""


@workflow.defn(name="waypoint.LiveStream")
class LiveStreamWorkflow:
    """Hosts a `WorkflowStream` until the model step it belongs to has answered."""

    @workflow.init
    def __init__(self) -> None:
        self.stream = WorkflowStream()
        self.closed = False

    @workflow.run
    async def run(self) -> None:
        """Wait for `close`, release readers (they read the rest by query), and end."""
        await workflow.wait_condition(lambda: self.closed)
        self.stream.detach_pollers()
        await workflow.wait_condition(workflow.all_handlers_finished)

    @workflow.signal(name=CLOSE)
    def close(self) -> None:
        """The step is done."""
        self.closed = True
