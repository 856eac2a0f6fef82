"""`waypoint.history_size`: a history segment's size, recorded, for the continue-as-new decision.

`workflow.info()` reports the length and size of the workflow task an activation belongs to,
and which task an event lands in can differ between a live run and its replay; the server's
own count, returned by an activity, replays from its history event.
"""

from __future__ import annotations

from temporalio import activity
from temporalio.exceptions import ApplicationError

from waypoint.protocol.spec import HistorySize


@activity.defn(name="waypoint.history_size")
async def history_size() -> HistorySize:
    """The calling run's history length and size in bytes, as the server counts them now."""
    info = activity.info()
    if info.workflow_id is None:
        raise ApplicationError("waypoint.history_size is a run's step", non_retryable=True)
    handle = activity.client().get_workflow_handle(info.workflow_id, run_id=info.workflow_run_id)
    execution = (await handle.describe()).raw_description.workflow_execution_info
    return HistorySize(events=execution.history_length, bytes=execution.history_size_bytes)
