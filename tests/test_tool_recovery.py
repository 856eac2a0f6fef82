"""Recovery in seconds: tools heartbeat, blocking work stays off the loop, limits per tool."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest
from pydantic import BaseModel
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from bench.fleet_agents import NAP_LOG_ENV, NAP_SECONDS
from bench.fleet_workers import start_worker, worker_env
from tests.conftest import running_worker
from waypoint._agent import Agent
from waypoint._tools import tool
from waypoint.client import runs
from waypoint.protocol import StepOptions
from waypoint.testing import reply, text, tool_use

HEARTBEAT = timedelta(seconds=2)
FAST = StepOptions(
    tool_heartbeat_timeout=HEARTBEAT,
    tool_timeout=timedelta(minutes=5),
    retry_initial_interval=timedelta(milliseconds=100),
    retry_max_interval=timedelta(milliseconds=200),
)


def nap_starts(log: Path, workflow_id: str) -> list[tuple[int, float, int]]:
    """(attempt, wall-clock start, pid) of each start of the nap tool for one run."""
    lines = log.read_text().splitlines() if log.exists() else []
    return [
        (int(attempt), float(at), int(pid))
        for wf, attempt, at, pid in (line.split() for line in lines)
        if wf == workflow_id
    ]


async def test_step_of_a_killed_worker_is_retried_on_another_within_the_heartbeat_timeout(
    client: Client, env: WorkflowEnvironment, tmp_path: Path, task_queue: str
) -> None:
    nap_log = tmp_path / "naps.log"
    address = env.client.service_client.config.target_host
    wenv = worker_env(address, task_queue, tmp_path, **{NAP_LOG_ENV: str(nap_log)})
    workers = [await start_worker(client, wenv, tmp_path / f"worker-{i}.log") for i in range(2)]
    try:
        handle = await runs.start_run(client, "napper", "nap", task_queue=task_queue, options=FAST)
        while not nap_starts(nap_log, handle.id):
            await asyncio.sleep(0.02)
        ((_, _, pid),) = nap_starts(nap_log, handle.id)
        doomed, spare = sorted(workers, key=lambda w: w.process.pid != pid)  # type: ignore[union-attr]
        doomed.kill()
        killed = time.time()
        await asyncio.wait_for(handle.result(), 60)
        done = time.time()
    finally:
        for worker in workers:
            worker.kill()
    _, (attempt, retried, pid) = nap_starts(nap_log, handle.id)
    assert spare.process is not None and (attempt, pid) == (2, spare.process.pid)
    # The retry waits for the heartbeat timeout (counted from the last heartbeat), not for the
    # five-minute tool timeout; slack for a loaded machine.
    assert retried - killed < HEARTBEAT.total_seconds() + 3
    assert done - killed < HEARTBEAT.total_seconds() + NAP_SECONDS + 10


class SleepArgs(BaseModel):
    seconds: float


def sleeper(name: str, fn) -> Agent:  # type: ignore[no-untyped-def]
    return Agent(
        name=name,
        model="claude-sonnet-4-6",
        system="sleep",
        tools=[fn],
        script=[reply(tool_use(fn.name, seconds=2.0)), reply(text("slept"))],
    )


async def test_sync_tool_runs_off_the_loop_so_queries_answer_meanwhile(
    client: Client, task_queue: str
) -> None:
    started, finished = threading.Event(), threading.Event()

    @tool("read")
    def slow_read(args: SleepArgs) -> str:
        """Block, as a synchronous client library would."""
        started.set()
        time.sleep(args.seconds)
        finished.set()
        return "read"

    async with running_worker(client, [sleeper("syncer", slow_read)], task_queue):
        handle = await runs.start_run(client, "syncer", "go", task_queue=task_queue)
        assert await asyncio.to_thread(started.wait, 20)
        asked = time.monotonic()
        status = await runs.status(client, handle.id, timeout=1.5)
        answered = time.monotonic() - asked
        assert not finished.is_set(), "the query waited for the tool"
        assert status.state == "running" and answered < 1.5
        result = await handle.result()
    assert result.output == "slept"


async def test_async_tool_blocking_the_loop_is_named_in_the_worker_log(
    client: Client, task_queue: str, caplog: pytest.LogCaptureFixture
) -> None:
    @tool("read")
    async def blocker(args: SleepArgs) -> str:
        """Block the event loop: `time.sleep` in an `async def`."""
        time.sleep(args.seconds + 0.5)
        return "blocked"

    caplog.set_level(logging.WARNING, logger="waypoint._activities.heartbeat")
    async with running_worker(client, [sleeper("blocker", blocker)], task_queue):
        handle = await runs.start_run(client, "blocker", "go", task_queue=task_queue)
        assert (await handle.result()).output == "slept"
    warnings = [
        r.getMessage() for r in caplog.records if r.name == "waypoint._activities.heartbeat"
    ]
    assert any("blocked" in w and "blocker" in w for w in warnings), warnings


async def test_per_tool_timeout_and_attempts_override_the_run_options(
    client: Client, task_queue: str
) -> None:
    executions: list[str] = []

    @tool("read", max_attempts=1)
    async def flaky(args: SleepArgs) -> str:
        """Fail every time."""
        executions.append("flaky")
        raise ConnectionError("upstream down")

    @tool("read", timeout=timedelta(seconds=1), max_attempts=2)
    async def stuck(args: SleepArgs) -> str:
        """Hang far longer than its own timeout."""
        executions.append("stuck")
        await asyncio.sleep(args.seconds)
        return "never"

    agent = Agent(
        name="limited",
        model="claude-sonnet-4-6",
        system="limits",
        tools=[flaky, stuck],
        script=[
            reply(tool_use("flaky", seconds=0), tool_use("stuck", seconds=60)),
            reply(text("gave up")),
        ],
    )
    options = FAST.model_copy(update={"tool_max_attempts": 5})  # the tools' own limits win
    async with running_worker(client, [agent], task_queue):
        started = time.monotonic()
        handle = await runs.start_run(
            client, "limited", "go", task_queue=task_queue, options=options
        )
        result = await asyncio.wait_for(handle.result(), 30)
        elapsed = time.monotonic() - started
    ledger = {r.tool: r for r in result.ledger if r.kind == "tool"}
    assert ledger["flaky"].status == "error" and "upstream down" in ledger["flaky"].summary
    assert ledger["stuck"].status == "error" and "timeout" in ledger["stuck"].summary.lower()
    assert sorted(executions) == ["flaky", "stuck", "stuck"]
    assert elapsed < 30  # 2 x 1 s, not the run's 5-minute tool timeout
