"""A `waypoint worker` subprocess serving `bench.agents:app`, to kill, restart and measure."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client

from bench.procs import cpu_seconds, rss_bytes

ROOT = Path(__file__).resolve().parent.parent
APP = "bench.agents:app"


class WorkerProcess:
    """One worker process on `queue`; `stores` holds its payload and transcript stores."""

    def __init__(self, address: str, queue: str, stores: Path, cache: int | None = None) -> None:
        self.queue = queue
        env = {
            **os.environ,
            "TEMPORAL_ADDRESS": address,
            "WAYPOINT_TASK_QUEUE": queue,
            "WAYPOINT_PAYLOAD_STORE": str(stores / "payloads"),
            "WAYPOINT_TRANSCRIPT_STORE": str(stores / "transcripts"),
            "PYTHONPATH": str(ROOT),
        }
        env.pop("ANTHROPIC_API_KEY", None)
        if cache is not None:
            env["WAYPOINT_MAX_CACHED_WORKFLOWS"] = str(cache)
        command = [str(Path(sys.executable).with_name("waypoint")), "worker", "--app", APP]
        self.process = subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        self.pid = self.process.pid

    async def ready(self, client: Client, timeout: float = 30.0) -> None:
        """Wait until this process polls its queue for workflow tasks."""
        request = DescribeTaskQueueRequest(
            namespace=client.namespace,
            task_queue=TaskQueue(name=self.queue),
            task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"worker {self.pid} exited with {self.process.returncode}")
            found = await client.workflow_service.describe_task_queue(request)
            if any(p.identity.startswith(f"{self.pid}@") for p in found.pollers):
                return
            await asyncio.sleep(0.1)
        raise TimeoutError(f"worker {self.pid} did not poll {self.queue} within {timeout:.0f}s")

    def rss(self) -> int:
        """Resident memory in bytes."""
        return rss_bytes(self.pid)

    def cpu(self) -> float:
        """CPU seconds used so far."""
        return cpu_seconds(self.pid)

    def kill(self) -> None:
        """SIGKILL, as a crash or an OOM kill would."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self.process.wait()

    def stop(self) -> None:
        """SIGTERM (the worker drains), then wait; kill if it lingers."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()
