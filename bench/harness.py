"""The benchmark's environment: its own dev server, clients, in-process workers, timed runs."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from temporalio.client import Client
from temporalio.worker import Worker

from bench.default_server import start_default_server
from bench.raw_workflow import RawSteps, raw_step
from waypoint._activities.model import ModelProvider
from waypoint._agent import Agent
from waypoint._operations.dev_server import DevServer, free_port, start_dev_server
from waypoint._plugin import WorkerOptions
from waypoint._worker import build_worker
from waypoint.client import runs
from waypoint.stores.payloads import data_converter


@dataclass
class Env:
    """One dev server and a client per data converter, all under `work`."""

    work: Path
    server: DevServer
    client: Client
    """Waypoint's client: the pydantic converter with the payload store, as the CLI uses."""
    raw_client: Client
    """The raw-Temporal baseline's client: the default converter."""

    def waypoint_worker(
        self, agents: Sequence[Agent], queue: str, claude: ModelProvider | None = None
    ) -> Worker:
        """An in-process Waypoint worker with an on-disk transcript store, as `waypoint worker`."""
        given = WorkerOptions(claude=claude, transcripts=self.work / "transcripts")
        return build_worker(self.client, agents, task_queue=queue, options=given)

    def raw_worker(self, queue: str) -> Worker:
        """An in-process worker for the raw-Temporal baseline."""
        return Worker(
            self.raw_client, task_queue=queue, workflows=[RawSteps], activities=[raw_step]
        )


@asynccontextmanager
async def env(work: Path, *, tuned: bool = True) -> AsyncIterator[Env]:
    """Start a dev server on free ports, with Waypoint's dynamic config unless `tuned` is False."""
    work.mkdir(parents=True, exist_ok=True)
    if tuned:
        server = start_dev_server(work / "state", port=free_port(), ui_port=free_port())
    else:
        server = await start_default_server(work / "state")
    try:
        store = work / "payloads"
        client = await Client.connect(server.address, data_converter=data_converter(store))
        raw_client = await Client.connect(server.address)
        yield Env(work, server, client, raw_client)
    finally:
        server.stop()


def new_id(prefix: str) -> str:
    """A fresh workflow id."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def time_waypoint(client: Client, agent: str, queue: str) -> tuple[float, str]:
    """Seconds from start to result of one Waypoint run, and its workflow id."""
    workflow_id = new_id(agent)
    started = time.perf_counter()
    handle = await runs.start_run(
        client, agent, "benchmark", task_queue=queue, workflow_id=workflow_id
    )
    await handle.result()
    return time.perf_counter() - started, workflow_id


def raw_sizes(waypoint_sizes: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """Character counts that give the raw steps Waypoint's payload bytes (less JSON framing)."""
    return [(max(0, i - 40), max(0, o - 20)) for i, o in waypoint_sizes]


async def time_raw(client: Client, sizes: list[tuple[int, int]], queue: str) -> tuple[float, str]:
    """Seconds from start to result of one raw-Temporal run, and its workflow id."""
    workflow_id = new_id("raw")
    started = time.perf_counter()
    await client.execute_workflow(RawSteps.run, sizes, id=workflow_id, task_queue=queue)
    return time.perf_counter() - started, workflow_id
