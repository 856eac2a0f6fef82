"""A SIGTERMed worker drains its running tools; a cancelled run waits for its effect's truth.

Each test counts the transfers downstream, in a table that does not deduplicate: a tool run
twice shows as two rows, whatever the ledger says.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from tests.conftest import running_worker
from tests.drain_app import Transfers, build
from waypoint.client import runs
from waypoint.errors import SettingsError
from waypoint.protocol import RunResult, StepOptions, StepRecord
from waypoint.settings import Settings
from waypoint.testing import WorkerProcess

ROOT = Path(__file__).parent.parent
OPTIONS = StepOptions(
    tool_timeout=timedelta(seconds=60),
    tool_heartbeat_timeout=timedelta(seconds=2),
    retry_initial_interval=timedelta(milliseconds=100),
    retry_max_interval=timedelta(milliseconds=500),
)
"""A worker that stops heartbeating loses its step to another within 2 s."""


async def wait_for_file(path: Path, timeout: float = 30) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not path.exists():
        assert asyncio.get_running_loop().time() < deadline, f"{path} never appeared"
        await asyncio.sleep(0.05)


def worker(env: WorkflowEnvironment, tmp_path: Path, task_queue: str, name: str, **extra: str):
    settings = {
        **os.environ,
        "TEMPORAL_ADDRESS": env.client.service_client.config.target_host,
        "WAYPOINT_TASK_QUEUE": task_queue,
        "DRAIN_TEST_TRANSFERS": str(tmp_path / "transfers.db"),
        "DRAIN_TEST_STARTED": str(tmp_path / f"started.{name}"),
        "PYTHONPATH": str(ROOT),
        **extra,
    }
    return WorkerProcess("tests.drain_app:agents", settings, tmp_path / f"{name}.log")


@contextmanager
def two_workers(
    env: WorkflowEnvironment,
    tmp_path: Path,
    task_queue: str,
    drain: str,
    seconds: str,
    then: str | None = None,
) -> Iterator[tuple[WorkerProcess, WorkerProcess]]:
    """A first worker that drains for `drain` s and a second to take over, both killed after.

    A transfer takes `seconds` on the first, `then` (or as long) on the second.
    """
    first = worker(
        env, tmp_path, task_queue, "first", WAYPOINT_DRAIN_SECONDS=drain, DRAIN_TEST_SECONDS=seconds
    )
    second = worker(env, tmp_path, task_queue, "second", DRAIN_TEST_SECONDS=then or seconds)
    try:
        yield first, second
    finally:
        first.kill()
        second.kill()


async def sigtermed_mid_effect(
    client: Client, tmp_path: Path, task_queue: str, first: WorkerProcess, agent: str
) -> WorkflowHandle[Any, RunResult]:
    """Start `agent`'s run on the `first` worker, and SIGTERM that once its transfer started."""
    first.start()
    handle = await runs.start_run(client, agent, "pay ada", task_queue=task_queue, options=OPTIONS)
    await wait_for_file(tmp_path / "started.first")
    assert first.process is not None
    first.process.send_signal(signal.SIGTERM)
    return handle


async def cancelled_mid_effect(
    client: Client,
    tmp_path: Path,
    task_queue: str,
    agent: str,
    seconds: float,
    options: StepOptions = OPTIONS,
) -> tuple[Transfers, int, list[StepRecord]]:
    """Cancel `agent`'s run once its transfer (`seconds` long) started, and let the run end.

    Returns the transfers, how many there were as the run ended, and the run's ledger.
    """
    transfers = Transfers(tmp_path / "transfers.db")
    agents = build(transfers, tmp_path / "started", seconds=seconds)
    async with running_worker(client, agents, task_queue):
        handle = await runs.start_run(
            client, agent, "pay ada", task_queue=task_queue, options=options
        )
        await wait_for_file(tmp_path / "started")
        await handle.cancel()
        with pytest.raises(WorkflowFailureError):
            await asyncio.wait_for(handle.result(), 60)
        sent = transfers.count()
        ledger = await runs.ledger(client, handle.id)
    return transfers, sent, ledger


async def exit_code(w: WorkerProcess, timeout: float = 60) -> int:
    assert w.process is not None
    return await asyncio.to_thread(w.process.wait, timeout)


async def test_sigterm_lets_a_slow_async_effect_finish_within_the_drain_time(
    client: Client, env: WorkflowEnvironment, tmp_path: Path, task_queue: str
) -> None:
    transfers = Transfers(tmp_path / "transfers.db")
    with two_workers(env, tmp_path, task_queue, drain="30", seconds="3") as (first, second):
        handle = await sigtermed_mid_effect(client, tmp_path, task_queue, first, "async_sender")
        assert await exit_code(first) == 0, (tmp_path / "first.log").read_text()
        assert transfers.count() == 1  # finished while draining, not cut off
        second.start()
        result = await asyncio.wait_for(handle.result(), 60)
    assert result.output == "Sent."
    send = next(r for r in result.ledger if r.tool == "send_async")
    assert (send.status, send.attempt, send.reconciled) == ("completed", 1, False)
    assert transfers.count() == 1
    assert not (tmp_path / "started.second").exists()  # the second worker never ran it


async def test_sigterm_during_a_thread_run_effect_longer_than_the_drain_sends_it_once(
    client: Client, env: WorkflowEnvironment, tmp_path: Path, task_queue: str
) -> None:
    transfers = Transfers(tmp_path / "transfers.db")
    with two_workers(env, tmp_path, task_queue, drain="1", seconds="8") as (first, second):
        handle = await sigtermed_mid_effect(client, tmp_path, task_queue, first, "thread_sender")
        second.start()  # ready to take the step over, were it handed over while it runs
        result = await asyncio.wait_for(handle.result(), 60)
        assert await exit_code(first) == 0, (tmp_path / "first.log").read_text()
    assert result.output == "Sent."
    send = next(r for r in result.ledger if r.tool == "send_blocking")
    # The stopping worker heartbeated until its thread ended and reported what it did.
    assert transfers.count() == 1, (tmp_path / "first.log").read_text()
    assert (send.status, send.attempt, send.reconciled) == ("completed", 1, False)
    assert "cannot be stopped" in (tmp_path / "first.log").read_text()


async def test_async_effect_cut_off_after_the_drain_time_is_handed_over_and_sent_once(
    client: Client, env: WorkflowEnvironment, tmp_path: Path, task_queue: str
) -> None:
    transfers = Transfers(tmp_path / "transfers.db")
    workers = two_workers(env, tmp_path, task_queue, drain="1", seconds="8", then="1")
    with workers as (first, second):
        handle = await sigtermed_mid_effect(client, tmp_path, task_queue, first, "async_sender")
        assert await exit_code(first, timeout=20) == 0, (tmp_path / "first.log").read_text()
        second.start()
        result = await asyncio.wait_for(handle.result(), 60)
    send = next(r for r in result.ledger if r.tool == "send_async")
    assert (send.status, send.attempt, send.reconciled) == ("completed", 2, False)
    assert transfers.count() == 1


async def test_cancelled_run_waits_for_its_thread_run_effect_and_records_it(
    client: Client, tmp_path: Path, task_queue: str
) -> None:
    transfers, sent, ledger = await cancelled_mid_effect(
        client, tmp_path, task_queue, "thread_sender", seconds=3
    )
    assert sent == 1  # the run ended after the transfer, not before it
    send = next(r for r in ledger if r.tool == "send_blocking")
    assert send.status == "completed", send
    assert transfers.find(send.effect_key or "") is not None
    await asyncio.sleep(4)  # longer than the tool: nothing more arrives after the run ended
    assert transfers.count() == 1


async def test_cancelled_run_records_what_its_async_effect_did_before_it_stopped(
    client: Client, tmp_path: Path, task_queue: str
) -> None:
    # Sends 0.5 s in, before its first heartbeat (1 s in) can bring it the cancel.
    transfers, sent, ledger = await cancelled_mid_effect(
        client, tmp_path, task_queue, "async_sender", seconds=0.5
    )
    send = next(r for r in ledger if r.tool == "send_async")
    # Either it sent and the step says so, or it stopped first and the lookup by its key says
    # nothing was sent; never a lookup that ran while the tool was still sending.
    if sent:
        assert (sent, send.status) == (1, "completed"), send
    else:
        assert send.status == "error" and "confirms it did not happen" in send.summary, send
    await asyncio.sleep(2)
    assert transfers.count() == sent


async def test_an_effect_that_finishes_as_the_run_is_cancelled_is_recorded_completed(
    client: Client, tmp_path: Path, task_queue: str
) -> None:
    """The transfer ends and the cancel is sent while no worker runs the workflow, so one
    workflow task brings both; temporalio raises the cancel there, not the result."""
    transfers = Transfers(tmp_path / "transfers.db")
    agents = build(transfers, tmp_path / "started", seconds=1)
    async with running_worker(client, agents, task_queue, workflows=[]):
        async with running_worker(client, agents, task_queue, no_remote_activities=True):
            handle = await runs.start_run(
                client, "async_sender", "pay ada", task_queue=task_queue, options=OPTIONS
            )
            await wait_for_file(tmp_path / "started")
        await handle.cancel()
        while (await handle.describe()).raw_description.pending_activities:
            await asyncio.sleep(0.05)  # sent, with nobody to tell yet
        async with running_worker(client, agents, task_queue, no_remote_activities=True):
            with pytest.raises(WorkflowFailureError):
                await asyncio.wait_for(handle.result(), 30)
            ledger = await runs.ledger(client, handle.id)
    send = next(r for r in ledger if r.tool == "send_async")
    assert (send.status, transfers.count()) == ("completed", 1), send


@pytest.mark.parametrize("value", ["-1", "soon", "nan", "inf"])
def test_a_drain_time_that_is_not_seconds_is_refused_with_the_fix(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("WAYPOINT_DRAIN_SECONDS", value)
    with pytest.raises(SettingsError, match="a number >= 0"):
        Settings.from_env()
    monkeypatch.setenv("WAYPOINT_DRAIN_SECONDS", "2.5")
    assert Settings.from_env().drain_seconds == 2.5
