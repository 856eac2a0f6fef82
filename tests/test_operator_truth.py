"""The CLI never lies about a run: ended runs show as ended, and a run answers with no worker up.

CLI subprocesses against the session's dev server; the worker runs in this process so a test can
stop it and carry on.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
from pathlib import Path

from temporalio.client import Client, WorkflowExecutionStatus

from tests.agents import PAY_SCRIPT, Payments, build_agent
from tests.conftest import TEMPORAL, running_worker, wait_for_state, wait_for_visibility
from tests.support.payer import open_payer
from tests.test_cli import cli_env, waypoint  # noqa: F401 - the fixture is used by name
from waypoint import __version__
from waypoint._agent import Agent
from waypoint._operations.processes import free_port
from waypoint.client import runs
from waypoint.protocol.search_attributes import ALL


async def closed(client: Client, run: str) -> WorkflowExecutionStatus | None:
    """Wait until Temporal has closed the run."""
    for _ in range(400):
        status = (await client.get_workflow_handle(run).describe()).status
        if status != WorkflowExecutionStatus.RUNNING:
            return status
        await asyncio.sleep(0.05)
    raise AssertionError(f"{run} never closed")


def one_line_error(proc: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stderr.strip().count("\n") == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    for needle in needles:
        assert needle in proc.stderr, proc.stderr


async def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(waypoint, env, *args)


async def an_unhosted_agent_queued_anyway_waits_until_terminated(
    client: Client, env: dict[str, str], task_queue: str
) -> None:
    """`start --queue-anyway` of an agent no worker hosts: the run waits, says why, ends."""
    queued = await cli(env, "start", "nosuchagent", "hello", "--queue-anyway")
    assert queued.returncode == 0, queued.stderr
    waits = f"no worker on queue {task_queue!r} hosts agent 'nosuchagent'"
    assert waits in queued.stderr and "waypoint terminate" in queued.stderr, queued.stderr
    started = re.search(r"started (\S+)", queued.stdout)
    assert started, queued.stdout
    shown = await cli(env, "status", started.group(1))
    assert f"waiting  {waits}" in shown.stdout, shown.stdout
    dropped = await cli(env, "terminate", started.group(1), "--reason", "misspelt")
    assert dropped.returncode == 0, dropped.stderr
    assert await closed(client, started.group(1)) == WorkflowExecutionStatus.TERMINATED


async def test_status_ledger_and_approve_work_with_no_worker_up(
    client: Client,
    task_queue: str,
    cli_env: dict[str, str],  # noqa: F811
) -> None:
    db = Path(cli_env["WAYPOINT_TEST_PAYMENTS"])
    async with open_payer(
        client, task_queue, db, approval=True, until="awaiting_approval"
    ) as opened:
        run = opened.handle.id  # the worker stops here: no worker answers what follows
    shown = await cli(cli_env, "status", run)
    assert shown.returncode == 0, shown.stderr
    assert "no worker answered; showing the run as of" in shown.stderr
    assert re.search(r"state\s+awaiting_approval", shown.stdout)
    assert f"waypoint approve {run} t2.tool.1.pay" in shown.stdout
    ledger = await cli(cli_env, "ledger", run)
    assert ledger.returncode == 0 and "t2.tool.1.pay" in ledger.stdout, ledger.stderr
    table = ledger.stdout.split("effect keys")[0]  # keys follow, one a line, never cut
    assert all(len(line) <= 80 for line in table.splitlines()), table
    approved = await cli(cli_env, "approve", run, "t2.tool.1.pay")
    assert approved.returncode == 0, approved.stderr
    assert "sent as a signal; the decision takes effect when a worker" in approved.stderr
    async with running_worker(client, [opened.agent], task_queue):
        assert (await opened.handle.result()).output == "Paid ada 5."
    assert opened.payments.count() == 1
    done = await cli(cli_env, "status", run)
    assert re.search(r"state\s+done", done.stdout) and "approve:" not in done.stdout


async def test_ended_runs_show_as_ended_and_refuse_actions_in_one_line(
    client: Client,
    task_queue: str,
    cli_env: dict[str, str],  # noqa: F811
) -> None:
    payments = Payments(Path(cli_env["WAYPOINT_TEST_PAYMENTS"]))
    agent = build_agent(payments, PAY_SCRIPT, approval=True)
    unscripted = Agent(name="unscripted", model="claude-sonnet-4-6", system="Hi.")
    env = {**cli_env, "WAYPOINT_TASK_QUEUE": task_queue}
    async with running_worker(client, [agent, unscripted], task_queue):
        cancelled = await runs.start_run(client, "payer", "pay", task_queue=task_queue)
        terminated = await runs.start_run(client, "payer", "pay", task_queue=task_queue)
        for handle in (cancelled, terminated):
            await wait_for_state(client, handle.id, "awaiting_approval")
        taken = await cli(env, "start", "payer", "again", "--id", cancelled.id)
        one_line_error(taken, "already running")
        assert (await cli(env, "cancel", cancelled.id)).returncode == 0
        stopped = await cli(env, "terminate", terminated.id, "--reason", "wrong vendor")
        assert stopped.returncode == 0, stopped.stderr
        assert await closed(client, cancelled.id) == WorkflowExecutionStatus.CANCELED
        assert await closed(client, terminated.id) == WorkflowExecutionStatus.TERMINATED

        refused = await cli(env, "start", "nosuchagent", "hello")  # tests/test_start_refused.py
        one_line_error(refused, "hosts agent 'nosuchagent' (hosted there: payer", "--queue-anyway")
        await an_unhosted_agent_queued_anyway_waits_until_terminated(client, env, task_queue)

        no_model = await cli(env, "start", "unscripted", "hello")
        one_line_error(no_model, "ModelNotConfigured", "'unscripted' has no offline script")
        failed = re.search(r"run (\S+) failed", no_model.stderr)
        assert failed, no_model.stderr

        for run, state in ((cancelled.id, "cancelled"), (terminated.id, "terminated")):
            shown = await cli(env, "status", run)
            assert shown.returncode == 0, shown.stderr
            assert re.search(rf"state\s+{state}", shown.stdout), shown.stdout
            assert "approve:" not in shown.stdout and "no worker" not in shown.stderr
            one_line_error(await cli(env, "result", run), state)
            one_line_error(await cli(env, "approve", run, "t2.tool.1.pay"), f"is {state}")
            one_line_error(await cli(env, "correct", run, "--note", "x"), f"is {state}")
            one_line_error(await cli(env, "resume", run, "--max-turns", "9"), f"is {state}")
            one_line_error(await cli(env, "terminate", run, "--reason", "again"), f"is {state}")
        assert "wrong vendor" in (await cli(env, "status", terminated.id)).stdout
        shown = await cli(env, "status", failed.group(1))
        assert re.search(r"state\s+failed", shown.stdout)
        assert "reason   ModelNotConfigured: agent 'unscripted' has no offline" in shown.stdout
        one_line_error(await cli(env, "result", failed.group(1)), "ModelNotConfigured")

        ended = ", ".join(f"'{r}'" for r in (cancelled.id, terminated.id, failed.group(1)))
        await wait_for_visibility(
            client, f"WorkflowId IN ({ended}) AND ExecutionStatus != 'Running'", 3
        )
        listed = await cli(env, "list", "--json")
        states = {r["run"]: r["state"] for r in json.loads(listed.stdout)}
        assert states[cancelled.id] == "cancelled" and states[terminated.id] == "terminated"
        assert states[failed.group(1)] == "failed"
    assert payments.count() == 0


async def test_expected_errors_are_one_line(cli_env: dict[str, str]) -> None:  # noqa: F811
    one_line_error(await cli(cli_env, "status", "no-such-run"), "no run 'no-such-run'")
    one_line_error(await cli(cli_env, "result", "no-such-run"), "no run 'no-such-run'")
    one_line_error(await cli(cli_env, "approve", "no-such-run", "t1"), "no run 'no-such-run'")
    not_json = await cli(cli_env, "resolve", "r", "t1.tool.1.pay", "--result", "{not json")
    one_line_error(not_json, "--result must be JSON", "--text")
    bad_app = await cli(cli_env, "worker", "--app", "tests.agents:PAY_SCRIPT")
    one_line_error(bad_app, "names a list, not an Agent")
    ui = await cli({**cli_env, "WAYPOINT_UI_URL": "http://ui.example:9999"}, "list", "--ui")
    assert ui.stdout.startswith("http://ui.example:9999/namespaces/default/workflows?query=")
    assert "WaypointStatus" in ui.stdout
    version = await cli(cli_env, "--version")
    assert version.returncode == 0 and version.stdout == f"waypoint {__version__}\n"
    helped = await cli({**cli_env, "COLUMNS": "80"}, "result", "--help")
    assert "<bool>" not in helped.stdout and "<str>" not in helped.stdout


async def test_a_server_without_search_attributes_gets_one_line_and_setup_fixes_it(
    cli_env: dict[str, str],  # noqa: F811
    tmp_path: Path,
) -> None:
    port = free_port()
    server = subprocess.Popen(
        [str(TEMPORAL), "server", "start-dev", "--headless", "--ip", "127.0.0.1"]
        + ["--port", str(port), "--ui-port", str(free_port()), "--log-level", "error"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    env = {**cli_env, "TEMPORAL_ADDRESS": f"127.0.0.1:{port}"}
    try:
        for _ in range(600):
            probe = await cli(env, "list", "--json")
            if probe.returncode == 0:
                break
            await asyncio.sleep(0.1)
        lacking = await cli(env, "start", "payer", "pay", "--check", "0", "--queue-anyway")
        one_line_error(lacking, "waypoint setup")
        registered = await cli(env, "setup")
        assert registered.returncode == 0, registered.stderr
        assert all(key.name in registered.stdout for key in ALL)
        assert "already" in (await cli(env, "setup")).stdout
        started = await cli(env, "start", "payer", "pay", "--queue-anyway")  # no worker here
        assert started.returncode == 0, started.stderr
        assert "no worker polls queue" in started.stderr
    finally:
        server.terminate()
        server.wait(timeout=30)
