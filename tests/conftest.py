"""A real Temporal dev server for the whole session, and a worker per test on its own queue."""

from __future__ import annotations

import asyncio
import sys
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from waypoint.agent import Agent
from waypoint.client import runs
from waypoint.errors import RunStuckError
from waypoint.protocol import RunStatus
from waypoint.protocol import search_attributes as sa
from waypoint.providers.scripted import ScriptedModel
from waypoint.worker import build_worker

TEMPORAL = Path(sys.executable).parent / "temporal"


@pytest.fixture(scope="session")
async def env() -> AsyncIterator[WorkflowEnvironment]:
    async with await WorkflowEnvironment.start_local(
        dev_server_existing_path=str(TEMPORAL),
        data_converter=pydantic_data_converter,
        search_attributes=sa.ALL,
        dev_server_extra_args=[
            "--dynamic-config-value",
            "history.transferProcessorMaxPollRPS=1000",
        ],
    ) as env:
        yield env


@pytest.fixture
async def client(env: WorkflowEnvironment) -> Client:
    return env.client


@pytest.fixture
def task_queue() -> str:
    return f"tq-{uuid.uuid4().hex[:8]}"


@asynccontextmanager
async def running_worker(
    client: Client,
    agents: Sequence[Agent],
    task_queue: str,
    **options: Any,
) -> AsyncIterator[ScriptedModel]:
    """Run a worker for these agents; yields the scripted model so tests can count its calls."""
    scripted = options.pop("scripted", None) or ScriptedModel(
        {a.name: a.script for a in agents if a.script is not None}
    )
    worker = build_worker(client, agents, task_queue=task_queue, scripted=scripted, **options)
    async with worker:
        yield scripted


async def wait_for_state(client: Client, run: str, state: str, timeout: float = 20) -> RunStatus:
    """Poll the run's status query until it reaches `state`."""
    deadline = asyncio.get_running_loop().time() + timeout
    current: RunStatus | str = "no answer yet"
    while True:
        try:
            current = await runs.status(client, run)
        except RunStuckError as err:  # e.g. a worker still reconnecting after a server restart
            current = str(err)
        if isinstance(current, RunStatus) and current.state == state:
            return current
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"run {run} did not reach {state}: {current}")
        await asyncio.sleep(0.05)


async def wait_for_count(payments: Any, n: int, timeout: float = 20) -> None:
    """Wait until the downstream `payments` (anything with `count()`) holds `n` rows."""
    deadline = asyncio.get_running_loop().time() + timeout
    while payments.count() != n:
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"expected {n} payments, have {payments.count()}")
        await asyncio.sleep(0.05)
