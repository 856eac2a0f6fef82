"""The truth about a run, from the server first: is it running, how did it end, what it waits for.

A run's own answer (the `status` query) needs a worker; Temporal's answer (describe, the run's
memo, its closing event) does not. So a view starts from Temporal's and adds the worker's when
one answers within a short timeout. A closed run is shown as Temporal closed it, whatever the
workflow last said about itself.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from datetime import timedelta

from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import EventType, TaskQueueKind, TaskQueueType
from temporalio.api.failure.v1 import Failure
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import (
    DescribeTaskQueueRequest,
    GetWorkflowExecutionHistoryReverseRequest,
)
from temporalio.client import (
    Client,
    WorkflowExecutionDescription,
    WorkflowExecutionStatus,
    WorkflowQueryFailedError,
)
from temporalio.service import RPCError, RPCStatusCode

from waypoint._operations import deploys
from waypoint.errors import DeployError, RunNotFoundError, RunStuckError
from waypoint.protocol import MEMO_KEY, RunMemo, RunStatus
from waypoint.protocol.queues import agent_queue, shared_queue
from waypoint.protocol.states import shown_state

QUICK = 4.0
"""Seconds the CLI waits for a worker before answering from the memo instead."""

CLOSED = {
    WorkflowExecutionStatus.COMPLETED: "completed",
    WorkflowExecutionStatus.FAILED: "failed",
    WorkflowExecutionStatus.CANCELED: "cancelled",
    WorkflowExecutionStatus.TERMINATED: "terminated",
    WorkflowExecutionStatus.TIMED_OUT: "timed out",
    WorkflowExecutionStatus.CONTINUED_AS_NEW: "continued-as-new",
}


def execution_name(status: WorkflowExecutionStatus | None) -> str:
    """`running`, or how Temporal closed the run."""
    return CLOSED.get(status, "running") if status is not None else "running"


@dataclass
class RunView:
    """A run as the server and, when one answers, a worker see it."""

    run: str
    agent: str
    execution: str
    """`running`, or how Temporal closed it: completed, failed, cancelled, terminated, ..."""
    task_queue: str
    run_id: str = ""
    """Temporal's id of the execution shown: the latest under the workflow id."""
    reason: str = ""
    """Why a closed run ended, in one line (failure message, termination reason)."""
    memo: RunMemo | None = None
    live: RunStatus | None = None
    """The worker's answer; None when no worker answered in time."""
    version: str = ""
    """Which build the run is on and may move to (`waypoint._operations.deploys`); ''
    when unversioned."""
    unhosted: str = ""
    """Why the run's steps wait: no worker on its queue hosts its agent; '' when one does."""

    @property
    def closed(self) -> bool:
        """Whether Temporal has closed the run: nothing can be approved or resumed."""
        return self.execution != "running"

    @property
    def state(self) -> str:
        """The state to show: Temporal's for a closed run, unless it completed on its own."""
        inner = self.live.state if self.live else (self.memo.state if self.memo else "starting")
        return shown_state(self.execution, inner)

    @property
    def fallback_note(self) -> str:
        """Said whenever the view comes from the memo because no worker answered; else ''."""
        if self.live is not None or self.closed:
            return ""
        if self.memo is None:
            return "no worker answered, and the run has not recorded its state yet"
        return f"no worker answered; showing the run as of {self.memo.updated_at}"

    @property
    def as_of(self) -> str:
        """When the memo was last written; '' when a worker answered."""
        return "" if self.live or self.memo is None else self.memo.updated_at


async def describe(client: Client, run: str) -> WorkflowExecutionDescription:
    """Describe the run's latest execution; needs no worker.

    Raises:
        RunNotFoundError: No run has that id.
    """
    try:
        return await client.get_workflow_handle(run).describe()
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            raise RunNotFoundError(f"no run {run!r} (see `waypoint list`)") from err
        raise


async def memo(description: WorkflowExecutionDescription) -> RunMemo | None:
    """The run's memo entry, if the run has written one yet."""
    return await description.memo_value(MEMO_KEY, None, type_hint=RunMemo)


async def close_reason(client: Client, run: str, run_id: str) -> str:
    """One line on why a closed run ended, read from its closing event."""
    request = GetWorkflowExecutionHistoryReverseRequest(
        namespace=client.namespace,
        execution=WorkflowExecution(workflow_id=run, run_id=run_id),
        maximum_page_size=1,
    )
    response = await client.workflow_service.get_workflow_execution_history_reverse(request)
    if not response.history.events:
        return ""
    event = response.history.events[0]
    kind = event.event_type
    if kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED:
        return failure_line(event.workflow_execution_failed_event_attributes.failure)
    if kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED:
        attrs = event.workflow_execution_terminated_event_attributes
        by = f" by {attrs.identity}" if attrs.identity else ""
        return f"terminated{by}: {attrs.reason or 'no reason given'}"
    if kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TIMED_OUT:
        return "the run's execution timeout passed"
    if kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED:
        return "cancelled on request"
    return ""


def failure_line(failure: Failure) -> str:
    """The innermost cause's message, first line only: what went wrong, not how it surfaced.

    The line is whole: `status --json` carries it as the run's `reason`.
    """
    while failure.HasField("cause") and failure.cause.message:
        failure = failure.cause
    kind = (
        failure.application_failure_info.type
        if failure.HasField("application_failure_info")
        else ""
    )
    first = (failure.message or "no message").strip().splitlines()[0]
    return f"{kind}: {first}" if kind else first


async def live_status(client: Client, run: str, timeout: float) -> RunStatus | None:
    """The worker's answer to the `status` query, or None when no worker answers in time.

    Raises:
        RunStuckError: A worker answers but cannot replay the run.
    """
    try:
        return await client.get_workflow_handle(run).query(
            "status", result_type=RunStatus, rpc_timeout=timedelta(seconds=timeout)
        )
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            raise RunNotFoundError(f"no run {run!r} (see `waypoint list`)") from err
        failure = await last_task_failure(client, run)
        if failure is None:  # timed out, or "no poller seen": no worker is up
            return None
        raise _stuck(run, failure) from err
    except WorkflowQueryFailedError as err:
        raise _stuck(run, await last_task_failure(client, run) or str(err)) from err


def _stuck(run: str, failure: str) -> RunStuckError:
    return RunStuckError(
        f"run {run!r} cannot make progress on this worker: {failure}. If a deploy changed "
        "what a step consumes, roll the worker back, or reset the run in the Web UI"
    )


async def last_task_failure(client: Client, run: str) -> str | None:
    """The message of the run's latest failed workflow task, if its last task failed.

    With encryption on, the message in history reads "Encoded failure": it is decoded with
    the client's keys, so the operator reads what went wrong.
    """
    failure = None
    async for event in client.get_workflow_handle(run).fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED:
            failure = event.workflow_task_failed_event_attributes.failure
        elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            failure = None
    if failure is None:
        return None
    try:
        return str(await client.data_converter.decode_failure(failure)) or failure.message
    except Exception:  # noqa: BLE001 - a failure this client cannot decode keeps its raw text
        return failure.message


async def view(
    client: Client, run: str, timeout: float = QUICK, ask_worker: bool = True
) -> RunView:
    """The run as Temporal records it, with the worker's live answer when one comes in time."""
    description = await describe(client, run)
    attrs = {key.name: value for key, value in description.typed_search_attributes}
    shown = RunView(
        run=run,
        agent=str(attrs.get("WaypointAgent", "")),
        execution=execution_name(description.status),
        task_queue=description.task_queue,
        run_id=description.run_id,
        memo=await memo(description),
    )
    if shown.closed and shown.execution != "completed":
        shown.reason = await close_reason(client, run, description.run_id)
    if not shown.closed:
        shown.version = await version_line(client, description)
        shown.unhosted = await unhosted_line(client, shown.task_queue, shown.agent)
    if ask_worker and not shown.closed:
        shown.live = await live_status(client, run, timeout)
    return shown


async def version_line(client: Client, description: WorkflowExecutionDescription) -> str:
    """The run's build, and for a pinned run left behind by a deploy, the build it waits for."""
    version = deploys.run_version(description)
    current = ""
    if version.behavior == "pinned":
        with contextlib.suppress(DeployError, RPCError):
            current = (await deploys.routing(client, version.deployment)).current
    return version.line(current)


async def unhosted_line(client: Client, task_queue: str, agent: str) -> str:
    """Says so when no worker on the run's queue hosts its agent: its steps wait for one."""
    if not agent or await has_pollers(client, agent_queue(task_queue, agent), steps=True):
        return ""
    shared = shared_queue(task_queue)
    return (
        f"no worker on queue {shared!r} hosts agent {agent!r}: the run waits until one "
        f"does (start `waypoint worker` with an app that has {agent!r}, "
        f"WAYPOINT_TASK_QUEUE={shared})"
    )


async def has_pollers(client: Client, task_queue: str, *, steps: bool = False) -> bool:
    """Whether any worker has polled the queue lately (the server forgets one after minutes).

    `steps`: for activities (an agent's queue), not runs.
    """
    kind = TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW
    if steps:
        kind = TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY
    request = DescribeTaskQueueRequest(
        namespace=client.namespace,
        task_queue=TaskQueue(name=task_queue, kind=TaskQueueKind.TASK_QUEUE_KIND_NORMAL),
        task_queue_type=kind,
    )
    response = await client.workflow_service.describe_task_queue(request, retry=True)
    return bool(response.pollers)
