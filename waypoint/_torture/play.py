"""Play one scenario against a real Temporal server: start it, drive it to an end, collect.

The driver (`waypoint._torture.runner`) fires the scenario's faults and operator actions; this
module starts the worker and the run (on the console's start form or not: `starts`), keeps the
driver going until the run ends or the scenario's time is up, and returns the `Outcome` that
`invariants.check` judges.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowQueryFailedError,
)
from temporalio.service import RPCError

from waypoint._operations.dev_server import DevServer
from waypoint._torture import evidence, starts
from waypoint._torture.runner import Driver, ModelServer, Outcome, make_current, worker_env
from waypoint._torture.scenario import Scenario
from waypoint.client import runs
from waypoint.errors import WaypointError
from waypoint.protocol import Limits
from waypoint.testing import WorkerProcess
from waypoint.testing.namespaces import NamespacedWorker, why_not
from waypoint.testing.notices import RECEIVER_ENV


async def _closed(handle: WorkflowHandle[Any, Any]) -> bool:
    described = await handle.describe()
    return described.status not in (
        WorkflowExecutionStatus.RUNNING,
        WorkflowExecutionStatus.CONTINUED_AS_NEW,
    )


async def run_scenario(
    client: Client,
    scenario: Scenario,
    folder: Path,
    api: ModelServer,
    *,
    timeout: float = 120.0,
    store: Path | None = None,
    server: DevServer | None = None,
) -> Outcome:
    """Run `scenario` to its end (or `timeout`), its worker in a subprocess; judge it later.

    `store` is the payload store the client reads (workers offload to it in a `store`
    scenario); `server` is the scenario's own server, for `server_kill`.
    """
    started = time.monotonic()
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "scenario.json").write_text(scenario.to_json())
    task_queue = f"torture-{scenario.seed}-{uuid.uuid4().hex[:6]}"
    address = client.service_client.config.target_host
    run_id = f"torture-{scenario.seed}-{uuid.uuid4().hex[:6]}"
    outcome = Outcome(scenario, task_queue, [run_id], folder)
    worker = _worker(
        scenario,
        worker_env(address, task_queue, folder, api, store, scenario.store),
        folder / "worker.log",
        outcome,
    )
    if scenario.notices:  # the receivers of `waypoint.testing.notices`, inbox in the folder
        worker.env |= {
            "WAYPOINT_NOTICE_ACTIVITIES": "waypoint.testing.notices:from_env",
            RECEIVER_ENV: f"{scenario.notices}:{folder}",
        }
    driver = Driver(client, scenario, worker, outcome, server)
    given = outcome.started = driver.drawn
    outcome.limits[run_id] = evidence.started_limits(given) or Limits()
    if scenario.console:
        from waypoint._torture.console_channel import ConsoleChannel  # authlib: cryptography

        driver.channel = ConsoleChannel()
        await driver.channel.open(
            client, folder, task_queue, scenario.signed, **starts.console(given)
        )
        if scenario.signed:
            worker.env["WAYPOINT_DECISION_KEYS"] += f",console:{driver.channel.public}"
    if scenario.versioned():
        driver.deployment = task_queue
        worker.env |= {"WAYPOINT_DEPLOYMENT": task_queue, "WAYPOINT_BUILD_ID": "v1"}
    worker.start(timeout=60)
    try:
        if driver.deployment:
            await make_current(client, driver.deployment, "v1")
        await starts.start(
            client,
            given,
            run_id,
            task_queue,
            form=scenario.form_start,
            folder=folder,
            channel=driver.channel,
        )
        supervisor = asyncio.create_task(_supervise(driver, outcome))
        try:
            await _drive(driver, outcome, started + timeout)
        finally:
            supervisor.cancel()
    finally:
        for w in (worker, *driver.builds):
            with contextlib.suppress(Exception):
                driver.stop(w)
            w.kill()
        if driver.channel is not None:
            await driver.channel.close()
        outcome.seconds = time.monotonic() - started
    return outcome


def _worker(scenario: Scenario, env: dict[str, str], log: Path, outcome: Outcome) -> WorkerProcess:
    """The scenario's worker; in a new pid namespace at each start where it says so and can."""
    app = "waypoint._torture.agent:agents"
    if not scenario.namespaced:
        return WorkerProcess(app, env, log)
    if why := why_not():
        outcome.notes.append(f"worker in this process's namespace: {why}")
        return WorkerProcess(app, env, log)
    # A journal of the scenario's own: its restarts share it, as a pod's volume.
    return NamespacedWorker(
        app, {**env, "WAYPOINT_ATTEMPT_JOURNAL": str(log.parent / "attempts")}, log
    )


def _revive(driver: Driver, outcome: Outcome) -> None:
    """Start again each worker a fault SIGKILLed inside a tool."""
    for worker in (driver.worker, *driver.builds):
        process = worker.process
        if process is not None and process.poll() is not None:
            driver.fault("worker_died_in_effect")
            driver.kills_at_start = driver.kills_fired()
            worker.start(timeout=60)
            outcome.restarts += 1


async def _supervise(driver: Driver, outcome: Outcome) -> None:
    """Restart dead workers within a second, as systemd or a pod would.

    Even while the driver waits on an answer the dead worker would have given (seed 2963 waited
    30 s for two answers before the driver's loop came round to restart it).
    """
    while True:
        await asyncio.sleep(0.1)
        _revive(driver, outcome)


async def _drive(driver: Driver, outcome: Outcome, deadline: float) -> None:
    """Poll every run until all have ended, reacting to what each waits for."""
    given_up: set[str] = set()
    while True:
        client = driver.client  # a new one after a server restart
        _revive(driver, outcome)
        open_runs = 0
        for run in [r for r in outcome.run_ids if r not in given_up]:
            handle = runs.handle(client, run)
            try:
                if await _closed(handle):
                    continue
            except RPCError:
                open_runs += 1  # the server is restarting
                continue
            open_runs += 1
            try:
                status = await runs.status(client, run, timeout=3)
            except WaypointError:
                continue  # a worker between lives
            if status.state == "request_invalid":
                # The API rejects the request the run built: no operator of a scenario can fix
                # that, so it is reported now rather than sent again until the deadline.
                outcome.stuck.append(f"{run}: {status.state} {status.detail}")
                given_up.add(run)
                continue
            try:
                await driver.step(run, status)
                if run == outcome.run_ids[0]:
                    await driver.act(run, status.turn)
            except (WaypointError, RPCError, WorkflowQueryFailedError) as err:
                outcome.notes.append(f"{run}: {err}")  # e.g. the run ended meanwhile
        if not open_runs:
            if await driver.rerun(outcome.run_ids[0]):
                continue
            return
        if time.monotonic() > deadline:
            for run in [r for r in outcome.run_ids if r not in given_up]:
                if not await _closed(runs.handle(client, run)):
                    with contextlib.suppress(Exception):
                        status = await runs.status(client, run, timeout=3)
                        outcome.stuck.append(f"{run}: {status.state} {status.detail}")
                        continue
                    outcome.stuck.append(f"{run}: no answer")
            return
        await asyncio.sleep(0.1)


def replay_command(path: Path) -> str:
    """The one command that replays a scenario file."""
    return f"{sys.executable} bench/torture.py --replay {path}"
