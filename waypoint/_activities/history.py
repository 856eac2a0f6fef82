"""`waypoint.history_size`: a history segment's size, recorded, for the continue-as-new decision.

`workflow.info()` reports the length and size of the workflow task an activation belongs to,
and which task an event lands in can differ between a live run and its replay; the server's
own count, returned by an activity, replays from its history event. A worker whose Temporal
credentials may not describe its runs gets a refusal that no retry mends: it is not retried,
and the run meters by its own estimate (`history_meter.py`).
"""

from __future__ import annotations

from temporalio import activity
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from waypoint._activities.heartbeat import heartbeating
from waypoint.protocol.spec import HISTORY_UNREADABLE, HistorySize

REFUSED = (RPCStatusCode.PERMISSION_DENIED, RPCStatusCode.UNAUTHENTICATED, RPCStatusCode.NOT_FOUND)
"""What the server says when asking again cannot help: no right to describe, no such run."""


@activity.defn(name="waypoint.history_size")
async def history_size() -> HistorySize:
    """The calling run's history length and size in bytes, as the server counts them now."""
    info = activity.info()
    if info.workflow_id is None:
        raise ApplicationError("waypoint.history_size is a run's step", non_retryable=True)
    handle = activity.client().get_workflow_handle(info.workflow_id, run_id=info.workflow_run_id)
    try:
        described = await heartbeating(handle.describe(), "waypoint.history_size")
    except RPCError as err:
        if err.status not in REFUSED:
            raise
        raise ApplicationError(
            f"the server refused to describe the run ({err.status.name}: {err.message}); "
            "give the worker's Temporal identity the right to describe workflows",
            type=HISTORY_UNREADABLE,
            non_retryable=True,
        ) from err
    execution = described.raw_description.workflow_execution_info
    return HistorySize(events=execution.history_length, bytes=execution.history_size_bytes)
