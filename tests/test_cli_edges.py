"""Where the CLI meets quick runs, reused ids, other servers and real terminals, it keeps its word.

CLI subprocesses against the session's dev server; the worker runs in this process, so a test
can stop it and ask the CLI about a run no worker answers for.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from pathlib import Path

import pytest
from temporalio.client import Client

from tests.agents import PAY_SCRIPT, Payments, build_agent
from tests.cli import BIN, ROOT
from tests.conftest import running_worker
from tests.test_cli import cli_env  # noqa: F401 - the fixture is used by name
from tests.test_operator_truth import cli, one_line_error
from waypoint import runs
from waypoint.cli.runs import confirm_started
from waypoint.errors import RunIdTakenError
from waypoint.server import free_port, start_dev_server


async def latest(client: Client, run: str) -> str:
    """Temporal's id of the latest execution under the workflow id `run`."""
    return (await runs.handle(client, run).describe()).run_id


async def test_start_of_a_run_that_completes_before_the_first_look_is_no_error(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    payments = Payments(tmp_path / "p.db")
    async with running_worker(client, [build_agent(payments, PAY_SCRIPT)], task_queue):
        handle = await runs.start_run(client, "payer", "pay ada 5", task_queue=task_queue)
        await handle.result()
        # The moment `waypoint start` first looks, the run may already have completed.
        assert await confirm_started(client, handle.id, task_queue, wait=5) == ""
    assert payments.count() == 1


async def test_a_finished_runs_id_is_refused_unless_rerun_is_asked_for(
    client: Client,
    task_queue: str,
    cli_env: dict[str, str],  # noqa: F811
) -> None:
    payments = Payments(Path(cli_env["WAYPOINT_TEST_PAYMENTS"]))
    run = f"invoice-{uuid.uuid4().hex[:6]}"
    async with running_worker(client, [build_agent(payments, PAY_SCRIPT)], task_queue):
        first = await cli(cli_env, "start", "payer", "Pay ada 5", "--id", run)
        assert first.returncode == 0, first.stderr
        await runs.handle(client, run).result()
        assert payments.count() == 1
        old = await latest(client, run)

        again = await cli(cli_env, "start", "payer", "Pay again", "--id", run)
        one_line_error(again, f"run {run!r} already ran", "it is done", old, "--rerun")
        with pytest.raises(RunIdTakenError, match="already ran"):
            await runs.start_run(client, "payer", "again", task_queue=task_queue, workflow_id=run)
        assert await latest(client, run) == old
        assert payments.count() == 1

        rerun = await cli(cli_env, "start", "payer", "Pay again", "--id", run, "--rerun")
        assert rerun.returncode == 0, rerun.stderr
        await runs.handle(client, run).result()
        assert await latest(client, run) != old
    assert payments.count() == 2  # asked for: a rerun does the work again under new keys


def test_server_stop_stops_only_the_server_of_the_state_dir_it_is_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("WAYPOINT_HOME", str(home))  # the record, kept out of the user's home
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    elsewhere = tmp_path / "elsewhere"
    server = start_dev_server(elsewhere, port=free_port(), ui_port=free_port(), detach=True)
    try:

        def stop(*args: str) -> subprocess.CompletedProcess[str]:
            command = [str(BIN / "waypoint"), "server", "--stop", *args]
            return subprocess.run(command, env=env, cwd=tmp_path, capture_output=True, text=True)

        asked = tmp_path / "asked"
        refused = stop("--state-dir", str(asked))
        one_line_error(refused, f"no detached server runs from {asked}", str(elsewhere))
        assert server.process.poll() is None, "a server nobody asked to stop was stopped"

        stopped = stop()  # none given, none in ./.waypoint: the last one started
        assert stopped.returncode == 0, stopped.stderr
        assert f"server stopped (state {elsewhere})" in stopped.stdout
        assert server.process.wait(timeout=30) is not None
        one_line_error(stop(), "no detached server runs from", "nothing stopped")
    finally:
        server.stop()
