"""`waypoint worker` subprocesses serving `bench.fleet_agents:app`, started until they poll."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from waypoint.testing import WorkerProcess

ROOT = Path(__file__).resolve().parent.parent
APP = "bench.fleet_agents:app"
QUEUE_TYPES = (TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW, TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY)


def worker_env(address: str, queue: str, work: Path, **extra: str) -> dict[str, str]:
    """What every worker of one fleet shares: server, queue, stores, downstream."""
    env = {
        **os.environ,
        "TEMPORAL_ADDRESS": address,
        "WAYPOINT_TASK_QUEUE": queue,
        "WAYPOINT_APP": APP,
        "WAYPOINT_PAYLOAD_STORE": str(work / "payloads"),
        "WAYPOINT_TRANSCRIPT_STORE": str(work / "transcripts"),
        "PYTHONPATH": str(ROOT),
        **extra,
    }
    env.pop("ANTHROPIC_API_KEY", None)
    env.pop("ANTHROPIC_AUTH_TOKEN", None)
    return env


async def polling(client: Client, queue: str, pid: int, timeout: float = 60.0) -> None:
    """Wait until process `pid` polls `queue` for both workflow and activity tasks."""
    deadline = time.monotonic() + timeout
    for kind in QUEUE_TYPES:
        request = DescribeTaskQueueRequest(
            namespace=client.namespace, task_queue=TaskQueue(name=queue), task_queue_type=kind
        )
        while True:
            try:
                found = await client.workflow_service.describe_task_queue(request)
            except RPCError as err:  # a loaded server may cancel a describe: ask again
                if err.status not in (RPCStatusCode.CANCELLED, RPCStatusCode.UNAVAILABLE):
                    raise
                await asyncio.sleep(0.2)
                continue
            if any(p.identity.startswith(f"{pid}@") for p in found.pollers):
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"worker {pid} did not poll {queue} within {timeout:.0f}s")
            await asyncio.sleep(0.05)


async def start_worker(
    client: Client, env: dict[str, str], log: Path, worker: WorkerProcess | None = None
) -> WorkerProcess:
    """Start (or restart) a worker subprocess and return once it polls its queue."""
    worker = worker or WorkerProcess(APP, env, log)
    await asyncio.to_thread(worker.start, 60.0)
    assert worker.process is not None
    await polling(client, env["WAYPOINT_TASK_QUEUE"], worker.process.pid)
    return worker
