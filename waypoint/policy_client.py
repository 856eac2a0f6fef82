"""Change or read the approval policy of a live run from a client.

A change goes as the `set_policy` Update when a worker answers (the sender gets a receipt, or
the refusal and its reason), else as a signal the run applies when a worker picks it up.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio.client import Client, WorkflowQueryFailedError
from temporalio.service import RPCError

from waypoint.deciding import QUERY_TIMEOUT, Sent, _deliver, _open_view
from waypoint.errors import RunStuckError
from waypoint.policy import ApprovalPolicy, PolicyChange, PolicyView


async def set_policy(
    client: Client,
    run: str,
    policy: ApprovalPolicy,
    *,
    reviewer: str,
    reason: str = "",
    timeout: float = QUERY_TIMEOUT,
) -> Sent:
    """Put `policy` in force on a live run for the rest of it; the ledger records who did.

    Raises:
        RunClosedError: The run has ended.
        DecisionRefusedError: The run refused the change.
    """
    seen = await _open_view(client, run, timeout, "change the policy of")
    change = PolicyChange(policy=policy, reviewer=reviewer, reason=reason, identity=client.identity)
    return await _deliver(client, seen, "set_policy", change, timeout)


async def show_policy(client: Client, run: str, timeout: float = QUERY_TIMEOUT) -> PolicyView:
    """The policy in force on a run, where it came from, and the approvals remembered.

    Raises:
        RunStuckError: No worker answered (the policy lives in the run's state).
    """
    handle = client.get_workflow_handle(run)
    try:
        return await handle.query(
            "policy", result_type=PolicyView, rpc_timeout=timedelta(seconds=timeout)
        )
    except (RPCError, WorkflowQueryFailedError) as err:
        raise RunStuckError(
            f"no worker answered for run {run!r} within {timeout:g}s ({err}): start "
            "`waypoint worker` on its task queue to read its policy"
        ) from err
