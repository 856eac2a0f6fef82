"""Worker versioning: which build a worker is, which build new runs go to, and what a run waits for.

A worker started with a deployment name and a build id (`WAYPOINT_DEPLOYMENT`,
`WAYPOINT_BUILD_ID`) joins a Temporal worker deployment. A run is pinned to the build that ran
its first workflow task, and only workers of that build ever run it, however long it parks.
An agent with `versioning="auto_upgrade"` instead moves to the current build at its next task;
its worker marks the run so as it loads the spec. New runs go to the current build, or to the
ramping one for the ramp's share. Everything here is a plain Temporal call: `temporal worker
deployment set-current-version` / `set-ramping-version` / `describe` do the same.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from google.protobuf.field_mask_pb2 import FieldMask
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.deployment.v1 import WorkerDeploymentVersion as DeploymentVersion
from temporalio.api.enums.v1 import RoutingConfigUpdateState
from temporalio.api.enums.v1 import VersioningBehavior as Behavior
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflow.v1 import VersioningOverride, WorkflowExecutionOptions
from temporalio.api.workflowservice.v1 import (
    DescribeTaskQueueRequest,
    DescribeWorkerDeploymentRequest,
    DescribeWorkerDeploymentVersionRequest,
    SetWorkerDeploymentCurrentVersionRequest,
    SetWorkerDeploymentRampingVersionRequest,
    UpdateWorkflowExecutionOptionsRequest,
)
from temporalio.client import Client, WorkflowExecutionDescription
from temporalio.common import VersioningBehavior, WorkerDeploymentVersion
from temporalio.service import RPCError, RPCStatusCode

from waypoint.errors import DeployError

if TYPE_CHECKING:  # `temporalio.worker` costs every CLI call ~80 ms: imported where used
    from temporalio.worker import WorkerDeploymentConfig


def deployment_config(
    deployment: str | None, build_id: str | None
) -> WorkerDeploymentConfig | None:
    """The worker's deployment version, runs pinned by default; None (unversioned) when unset.

    Raises:
        DeployError: Only one of the two is set, or the name has a dot (Temporal's separator).
    """
    if not deployment and not build_id:
        return None
    if not deployment or not build_id:
        raise DeployError(
            "set both WAYPOINT_DEPLOYMENT and WAYPOINT_BUILD_ID (or --deployment and --build-id) "
            "to version the worker, or neither"
        )
    if "." in deployment:
        raise DeployError(f"deployment name {deployment!r} must not contain a dot")
    from temporalio.worker import WorkerDeploymentConfig

    return WorkerDeploymentConfig(
        version=WorkerDeploymentVersion(deployment, build_id),
        use_worker_versioning=True,
        default_versioning_behavior=VersioningBehavior.PINNED,
    )


async def auto_upgrade(client: Client, workflow_id: str, run_id: str) -> None:
    """Let this run move to the current build at its next task (idempotent)."""
    override = VersioningOverride(
        behavior=Behavior.VERSIONING_BEHAVIOR_AUTO_UPGRADE,  # what servers before 1.28 read
        auto_upgrade=True,
    )
    options = WorkflowExecutionOptions(versioning_override=override)
    await client.workflow_service.update_workflow_execution_options(
        UpdateWorkflowExecutionOptionsRequest(
            namespace=client.namespace,
            workflow_execution=WorkflowExecution(workflow_id=workflow_id, run_id=run_id),
            workflow_execution_options=options,
            update_mask=FieldMask(paths=["versioning_override"]),
        )
    )


@dataclass
class Routing:
    """Where a deployment sends new runs."""

    deployment: str
    current: str
    """The current build id; '' while none is set (new runs go to unversioned workers)."""
    ramping: str = ""
    ramp_percent: float = 0.0
    builds: tuple[str, ...] = ()
    """Every build that has polled, oldest first."""
    propagating: bool = False
    """The last change has not reached every task queue yet: some tasks still follow the old."""


async def routing(client: Client, deployment: str) -> Routing:
    """The deployment's current and ramping builds.

    Raises:
        DeployError: No worker of this deployment has polled yet.
    """
    response = await _send(
        client.workflow_service.describe_worker_deployment,
        DescribeWorkerDeploymentRequest(namespace=client.namespace, deployment_name=deployment),
        READ_TIMEOUT,
    )
    info = response.worker_deployment_info
    config = info.routing_config
    summaries = sorted(info.version_summaries, key=lambda v: v.create_time.ToDatetime())
    return Routing(
        deployment=deployment,
        current=config.current_deployment_version.build_id,
        ramping=config.ramping_deployment_version.build_id,
        ramp_percent=config.ramping_version_percentage,
        builds=tuple(v.deployment_version.build_id for v in summaries),
        propagating=info.routing_config_update_state
        == RoutingConfigUpdateState.ROUTING_CONFIG_UPDATE_STATE_IN_PROGRESS,
    )


READ_TIMEOUT = 10.0
"""Seconds `routing` asks again while a busy server cancels the describe."""
PROPAGATION_TIMEOUT = 30.0
"""Seconds `set_current` and `ramp` wait for the change to reach every task queue."""


QUEUES_SETTLE = 5.0
"""Seconds every task queue must have routed by a change before the queues outvote the flag."""


async def _propagated(client: Client, deployment: str, timeout: float) -> None:
    """Return once the routing change has reached every task queue of the deployment.

    The server accepts a change before its task queues learn of it (about a second on the dev
    server); meanwhile an auto-upgrade run's next task still goes to the old build. The
    deployment's flag can stay `propagating` for good after every queue has the change (a lost
    completion signal, temporalio/temporal#11842, seen on a busy CI machine): once the queues
    have routed by it for `QUEUES_SETTLE` seconds, time enough for their partitions to follow
    the root, they have the last word.

    Raises:
        DeployError: The change has not reached every task queue within `timeout` seconds.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    routed_since: float | None = None
    while (now := await routing(client, deployment)).propagating:
        if not await queues_route(client, now):
            routed_since = None
        elif routed_since is None:
            routed_since = loop.time()
        elif loop.time() - routed_since >= QUEUES_SETTLE:
            return
        if loop.time() > deadline:
            raise DeployError(
                f"deployment {deployment!r} accepted the change but its task queues have not "
                f"all picked it up after {timeout:g}s: check `waypoint deploy show` (it says "
                "`propagating` until they have) and that the server's matching service is up"
            )
        await asyncio.sleep(0.25)


async def queues_route(client: Client, by: Routing) -> bool:
    """Whether the root partition of every task queue of the routed-to build routes by `by`."""
    build = by.ramping or by.current
    if not build:
        return False
    try:
        version = await client.workflow_service.describe_worker_deployment_version(
            DescribeWorkerDeploymentVersionRequest(
                namespace=client.namespace,
                deployment_version=DeploymentVersion(deployment_name=by.deployment, build_id=build),
            )
        )
        for queue in version.version_task_queues:
            described = await client.workflow_service.describe_task_queue(
                DescribeTaskQueueRequest(
                    namespace=client.namespace,
                    task_queue=TaskQueue(name=queue.name),
                    task_queue_type=queue.type,
                )
            )
            info = described.versioning_info
            routed = (
                info.current_deployment_version.build_id,
                info.ramping_deployment_version.build_id,
                info.ramping_version_percentage,
            )
            if routed != (by.current, by.ramping, by.ramp_percent):
                return False
    except RPCError:
        return False  # a busy or forgetful server: ask the deployment again
    return bool(version.version_task_queues)


async def set_current(
    client: Client, deployment: str, build_id: str, timeout: float = PROPAGATION_TIMEOUT
) -> None:
    """Send every new run to `build_id`; runs pinned elsewhere stay where they are.

    Returns once every task queue routes by the change, so what follows goes to `build_id`.

    Raises:
        DeployError: No worker of that build has polled yet, or the change did not reach
            every task queue within `timeout` seconds.
    """
    request = SetWorkerDeploymentCurrentVersionRequest(
        namespace=client.namespace, deployment_name=deployment, build_id=build_id
    )
    await _send(client.workflow_service.set_worker_deployment_current_version, request, timeout)
    await _propagated(client, deployment, timeout)


async def ramp(
    client: Client,
    deployment: str,
    build_id: str,
    percent: float,
    timeout: float = PROPAGATION_TIMEOUT,
) -> None:
    """Send `percent` of new runs to `build_id`, the rest to the current build; 0 ends the ramp.

    Returns once every task queue routes by the change.

    Raises:
        DeployError: The percentage is out of range, no worker of that build has polled, or
            the change did not reach every task queue within `timeout` seconds.
    """
    if not 0 <= percent <= 100:
        raise DeployError(f"ramp percentage {percent:g} must be between 0 and 100")
    request = SetWorkerDeploymentRampingVersionRequest(
        namespace=client.namespace,
        deployment_name=deployment,
        build_id="" if percent == 0 else build_id,
        percentage=0 if percent == 0 else percent,
    )
    await _send(client.workflow_service.set_worker_deployment_ramping_version, request, timeout)
    await _propagated(client, deployment, timeout)


@dataclass
class RunVersion:
    """Which build a run is on, and whether it may move."""

    behavior: str
    """`pinned`, `auto_upgrade`, or '' for a run on unversioned workers."""
    deployment: str = ""
    build_id: str = ""

    def line(self, current: str = "") -> str:
        """One line for `waypoint status`; says the build a pinned run waits for."""
        if not self.behavior:
            return ""
        here = f"{self.deployment}.{self.build_id}"
        if self.behavior == "auto_upgrade":
            return f"auto-upgrade, on {here}; moves to the current build at its next step"
        if current and current != self.build_id:
            return (
                f"pinned to {here} (current: {current}): only a worker of build "
                f"{self.build_id} continues it"
            )
        return f"pinned to {here}"


def run_version(description: WorkflowExecutionDescription) -> RunVersion:
    """The run's build from describe (no worker needed); an override wins over the worker's say."""
    info = description.raw_description.workflow_execution_info.versioning_info
    version = info.deployment_version
    behavior = info.behavior
    if info.HasField("versioning_override"):
        override = info.versioning_override
        if override.HasField("pinned"):
            behavior, version = Behavior.VERSIONING_BEHAVIOR_PINNED, override.pinned.version
        elif override.auto_upgrade:
            behavior = Behavior.VERSIONING_BEHAVIOR_AUTO_UPGRADE
    names = {
        Behavior.VERSIONING_BEHAVIOR_PINNED: "pinned",
        Behavior.VERSIONING_BEHAVIOR_AUTO_UPGRADE: "auto_upgrade",
    }
    return RunVersion(names.get(behavior, ""), version.deployment_name, version.build_id)


_TRANSIENT = {
    RPCStatusCode.CANCELLED,
    RPCStatusCode.DEADLINE_EXCEEDED,
    RPCStatusCode.UNAVAILABLE,
    RPCStatusCode.RESOURCE_EXHAUSTED,
    RPCStatusCode.ABORTED,
}
"""A busy server answers a routing change with these; the change is safe to send again."""


async def _send(call: Any, request: Any, timeout: float) -> Any:
    """Send a request, again while the server is only busy, for up to `timeout` s.

    A loaded server answers a describe or a routing change with "operation was canceled" at
    times (seen in CI with four dev servers on two cores); the request itself was fine.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        try:
            return await call(request)
        except RPCError as err:
            if err.status not in _TRANSIENT or loop.time() > deadline:
                build = getattr(request, "build_id", "")
                raise _deploy_error(err, request.deployment_name, build) from err
        await asyncio.sleep(0.2)


def _deploy_error(err: RPCError, deployment: str, build_id: str = "") -> BaseException:
    """A missing deployment or build as a hint to start its worker; anything else unchanged."""
    if err.status in (RPCStatusCode.NOT_FOUND, RPCStatusCode.FAILED_PRECONDITION):
        build = f" build {build_id!r} of" if build_id else ""
        return DeployError(
            f"no worker of{build} deployment {deployment!r} has polled yet: start one with "
            f"WAYPOINT_DEPLOYMENT={deployment}"
            + (f" WAYPOINT_BUILD_ID={build_id}" if build_id else "")
            + f" waypoint worker ({err.message})"
        )
    return err
