"""The CLI never cuts what a person needs: `--json` is whole, piped tables keep every cell.

rich takes 80 columns when stdout is not a terminal, as when these tests (or a script, or a
log) read it; only a terminal, or `COLUMNS`, gets a table fitted to its width.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

from temporalio.client import Client

from tests.agents import Payments, build_agent
from tests.conftest import running_worker, wait_for_state, wait_for_visibility
from tests.test_operator_truth import cli, closed
from waypoint.client import runs
from waypoint.testing import Script, reply, text, tool_use

CITY = "Oslo [north] " + "fjord " * 18 + "end"
"""A summary past 100 characters (the run keeps 160), with a `[tag]` rich must not eat."""
SUMMARY = f"sunny in {CITY}"
LONG: Script = [
    reply(tool_use("weather", city=CITY)),
    reply(tool_use("pay", payee="ada", amount=5)),
    reply(text("Paid ada 5.")),
]


def piped(env: dict[str, str]) -> dict[str, str]:
    """`env` without `COLUMNS`, which the test runner may export: a plain pipe, no width given."""
    return {name: value for name, value in env.items() if name != "COLUMNS"}


def line_of(stdout: str, step: str) -> str:
    """The one line of a table that starts with `step`."""
    (line,) = [line for line in stdout.splitlines() if line.startswith(step)]
    return line


def json_summary(records: list[dict], step: str) -> str:
    """The summary `--json` gives for `step`."""
    (summary,) = [r["summary"] for r in records if r["step_id"] == step]
    return summary


async def test_ledger_piped_and_json_hold_whole_summaries_also_of_a_cancelled_run(
    client: Client, task_queue: str, cli_env: dict[str, str]
) -> None:
    assert len(SUMMARY) > 100
    agent = build_agent(Payments(Path(cli_env["WAYPOINT_TEST_PAYMENTS"])), LONG, approval=True)
    async with running_worker(client, [agent], task_queue):
        handle = await runs.start_run(client, "payer", "pay ada 5", task_queue=task_queue)
        await wait_for_state(client, handle.id, "awaiting_approval")
        whole = await cli(piped(cli_env), "ledger", handle.id)
        assert whole.returncode == 0, whole.stderr
        assert SUMMARY in line_of(whole.stdout, "t1.tool.1.weather"), whole.stdout

        narrow = {**cli_env, "COLUMNS": "80"}  # a terminal 80 wide: fitted, the summary elided
        fitted = await cli(narrow, "ledger", handle.id)
        assert fitted.returncode == 0, fitted.stderr
        assert all(len(line) <= 80 for line in fitted.stdout.split("effect keys")[0].splitlines())
        wide = await cli(narrow, "ledger", handle.id, "--wide")
        assert wide.returncode == 0, wide.stderr
        assert SUMMARY in line_of(wide.stdout, "t1.tool.1.weather"), wide.stdout

        await handle.cancel()
        await closed(client, handle.id)
        # Closed, the run is no longer asked by default; a worker that polls still answers.
        ledger = await cli(cli_env, "ledger", handle.id, "--json")
        assert ledger.returncode == 0, ledger.stderr
        records = json.loads(ledger.stdout)
        assert records[0]["step_id"] == "t0.spec", records  # the whole ledger, not the memo's
        assert json_summary(records, "t1.tool.1.weather") == SUMMARY
        status = await cli(cli_env, "status", handle.id, "--json")
        assert status.returncode == 0, status.stderr
        shown = json.loads(status.stdout)
        assert shown["state"] == "cancelled"
        assert json_summary(shown["last_steps"], "t1.tool.1.weather") == SUMMARY


async def test_status_json_of_a_completed_run_holds_whole_summaries_with_no_worker_up(
    client: Client, task_queue: str, cli_env: dict[str, str]
) -> None:
    agent = build_agent(Payments(Path(cli_env["WAYPOINT_TEST_PAYMENTS"])), LONG)
    async with running_worker(client, [agent], task_queue):
        handle = await runs.start_run(client, "payer", "pay ada 5", task_queue=task_queue)
        await handle.result()
    status = await cli(cli_env, "status", handle.id, "--json")
    assert status.returncode == 0, status.stderr
    shown = json.loads(status.stdout)
    assert shown["answered_by"] == "memo"  # its steps, whole, from the run's result
    assert json_summary(shown["last_steps"], "t1.tool.1.weather") == SUMMARY


async def test_list_piped_shows_whole_run_ids_and_every_column_on_one_line(
    client: Client, task_queue: str, cli_env: dict[str, str]
) -> None:
    run = f"invoice-{'for-the-north-sea-ferry-company-' * 2}{uuid.uuid4().hex[:8]}"
    agent = build_agent(Payments(Path(cli_env["WAYPOINT_TEST_PAYMENTS"])), LONG)
    async with running_worker(client, [agent], task_queue):
        handle = await runs.start_run(
            client, "payer", "pay ada 5", task_queue=task_queue, workflow_id=run
        )
        await handle.result()
    await wait_for_visibility(client, f"WorkflowId = '{run}' AND ExecutionStatus = 'Completed'", 1)
    for env, flags in [(piped(cli_env), []), ({**cli_env, "COLUMNS": "80"}, ["--wide"])]:
        listed = await cli(env, "list", "--limit", "1000", *flags)
        assert listed.returncode == 0, listed.stderr
        assert line_of(listed.stdout, run).split()[:4] == [run, "payer", "done", "3"], listed.stdout
