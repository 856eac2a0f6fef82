"""`load_fork`: the state a fork starts from, asked of the run it forks by the fork itself."""

from __future__ import annotations

from temporalio import activity
from temporalio.client import WorkflowQueryFailedError
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from waypoint._activities.heartbeat import heartbeating
from waypoint.protocol import AgentState, ForkSource
from waypoint.protocol.vocabulary import CANNOT_FORK


@activity.defn(name="waypoint.load_fork")
async def load_fork(source: ForkSource) -> AgentState:
    """The source run's own `fork_state`: what Temporal's copy of that run holds, not a client's."""
    handle = activity.client().get_workflow_handle(source.workflow_id)
    try:
        return await heartbeating(
            handle.query("fork_state", source.after_turn, result_type=AgentState), "load_fork"
        )
    except WorkflowQueryFailedError as err:
        raise ApplicationError(
            f"cannot fork {source.workflow_id!r} after turn {source.after_turn}: {err}",
            type=CANNOT_FORK,
            non_retryable=True,
        ) from err
    except RPCError as err:
        if err.status != RPCStatusCode.NOT_FOUND:
            raise
        raise ApplicationError(
            f"cannot fork {source.workflow_id!r}: no such run in this namespace",
            type=CANNOT_FORK,
            non_retryable=True,
        ) from err
