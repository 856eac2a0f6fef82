"""Where the CLI meets quick runs, reused ids, other servers and real terminals, it keeps its word.

CLI subprocesses against the session's dev server; the worker runs in this process, so a test
can stop it and ask the CLI about a run no worker answers for.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import time
import uuid
from datetime import datetime, timedelta
from pathlib import Path
from typing import IO

import pytest
from temporalio.client import Client

from tests.agents import PAY_SCRIPT, Payments, build_agent
from tests.cli import ROOT, installed, spawn, stop
from tests.conftest import Claude, payer_run, running_worker, wait_for_state
from tests.fake_messages_api import FakeMessagesAPI
from tests.fake_messages_api import text as says
from tests.test_operator_truth import cli, closed, one_line_error
from waypoint._cli.runs import confirm_started
from waypoint._operations.dev_server import free_port, start_dev_server
from waypoint.client import runs
from waypoint.errors import RunIdTakenError
from waypoint.protocol import Limits
from waypoint.testing import Script, reply, text, tool_use


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
    client: Client, task_queue: str, cli_env: dict[str, str]
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


async def test_a_rerun_under_a_running_runs_id_is_refused_not_attached(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    agent = build_agent(Payments(tmp_path / "p.db"), PAY_SCRIPT, approval=True)
    run = f"running-{uuid.uuid4().hex[:6]}"
    async with running_worker(client, [agent], task_queue):
        first = await runs.start_run(client, "payer", "pay", task_queue=task_queue, workflow_id=run)
        await wait_for_state(client, run, "awaiting_approval")
        with pytest.raises(RunIdTakenError, match="already running"):
            await runs.start_run(
                client, "payer", "pay", task_queue=task_queue, workflow_id=run, rerun=True
            )
        await first.terminate()


def test_server_stop_stops_only_the_server_of_the_state_dir_it_is_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("WAYPOINT_HOME", str(home))  # the record, kept out of the user's home
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    elsewhere = tmp_path / "elsewhere"
    server = start_dev_server(elsewhere, port=free_port(), ui_port=free_port(), detach=True)
    try:

        def stop_server(*args: str) -> subprocess.CompletedProcess[str]:
            return installed(env, "server", "--stop", *args, cwd=tmp_path)

        asked = tmp_path / "asked"
        refused = stop_server("--state-dir", str(asked))
        one_line_error(refused, f"no detached server runs from {asked}", str(elsewhere))
        assert server.process.poll() is None, "a server nobody asked to stop was stopped"

        stopped = stop_server()  # none given, none in ./.waypoint: the last one started
        assert stopped.returncode == 0, stopped.stderr
        assert f"server stopped (state {elsewhere})" in stopped.stdout
        assert server.process.wait(timeout=30) is not None
        one_line_error(stop_server(), "no detached server runs from", "nothing stopped")
    finally:
        server.stop()


async def finished_run(
    client: Client,
    task_queue: str,
    payments: Payments,
    approval: bool = False,
    script: Script = PAY_SCRIPT,
) -> str:
    """A run of the payer that has completed, paying once; its worker is gone afterwards."""
    agent = build_agent(payments, script, approval=approval)
    async with running_worker(client, [agent], task_queue):
        handle = await runs.start_run(client, "payer", "pay ada 5", task_queue=task_queue)
        if approval:
            await wait_for_state(client, handle.id, "awaiting_approval")
            reviewer = "ann.lovelace@accounts-payable.example.com"  # a summary longer still
            await runs.approve(client, handle.id, "t2.tool.1.pay", reviewer=reviewer)
        await handle.result()
    assert payments.count() == 1
    return handle.id


LONG_SUMMARIES: Script = [
    reply(tool_use("weather", city="Oslo " * 40)),  # a 160-character summary
    reply(tool_use("pay", payee="ada", amount=5)),  # "(decided by ...)" lengthens it
    reply(text("Paid ada 5.")),
]


@pytest.mark.parametrize("width", [80, 120, 200])
async def test_ledger_keeps_status_tokens_and_cost_at_every_terminal_width(
    client: Client, task_queue: str, cli_env: dict[str, str], width: int
) -> None:
    payments = Payments(Path(cli_env["WAYPOINT_TEST_PAYMENTS"]))
    run = await finished_run(client, task_queue, payments, approval=True, script=LONG_SUMMARIES)
    shown = await cli({**cli_env, "COLUMNS": str(width)}, "ledger", run)
    assert shown.returncode == 0, shown.stderr
    table = shown.stdout.split("effect keys")[0].splitlines()
    assert table[0].split() == ["step", "status", "tokens", "cost", "summary"], shown.stdout
    assert all(len(line) <= width for line in table), shown.stdout
    model = [line.split() for line in table if line.startswith("t2.model")][0]
    assert model[1] == "completed" and model[2].replace(",", "").isdigit(), shown.stdout
    assert model[3].startswith("$"), shown.stdout
    pay = [line.split() for line in table if line.startswith("t2.tool.1.pay")][0]
    assert pay[1] == "completed", shown.stdout


async def test_list_json_gives_each_runs_id_and_its_start_in_iso_utc(
    client: Client, task_queue: str, cli_env: dict[str, str]
) -> None:
    run = await finished_run(client, task_queue, Payments(Path(cli_env["WAYPOINT_TEST_PAYMENTS"])))
    described = await runs.handle(client, run).describe()
    deadline = time.monotonic() + 30
    while True:  # the list reads Temporal's visibility store, which may lag a moment
        listed = await cli(cli_env, "list", "--json", "--limit", "1000")
        assert listed.returncode == 0, listed.stderr
        rows = [r for r in json.loads(listed.stdout) if r["run"] == run]
        if rows or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.2)
    assert rows, f"{run} never listed"
    assert rows[0]["run_id"] == described.run_id
    started = datetime.fromisoformat(rows[0]["started"])
    assert started.utcoffset() == timedelta(0)
    assert abs(started - described.start_time) < timedelta(seconds=1)


async def test_watch_of_an_ended_run_with_no_worker_prints_its_end_from_history(
    client: Client, task_queue: str, cli_env: dict[str, str]
) -> None:
    run = await finished_run(client, task_queue, Payments(Path(cli_env["WAYPOINT_TEST_PAYMENTS"])))
    watched = await cli(cli_env, "watch", run)
    assert watched.returncode == 0, watched.stderr
    assert "t2.tool.1.pay" in watched.stdout
    assert re.search(r"ended\s+done: 3 turns", watched.stdout), watched.stdout
    as_json = await cli(cli_env, "watch", run, "--json")
    assert as_json.returncode == 0, as_json.stderr
    end = json.loads(as_json.stdout.splitlines()[-1])
    assert end["type"] == "run_ended" and end["state"] == "done" and end["turns"] == 3

    agent = build_agent(
        Payments(Path(cli_env["WAYPOINT_TEST_PAYMENTS"])), PAY_SCRIPT, approval=True
    )
    async with running_worker(client, [agent], task_queue):
        waiting = await runs.start_run(client, "payer", "pay", task_queue=task_queue)
        await wait_for_state(client, waiting.id, "awaiting_approval")
        await waiting.cancel()
        await closed(client, waiting.id)
    one_line_error(await cli(cli_env, "watch", waiting.id), f"run {waiting.id} cancelled")


async def test_status_says_what_moves_a_run_the_api_rejects_and_resume_sends_it_again(
    client: Client, task_queue: str, tmp_path: Path, cli_env: dict[str, str], claude: Claude
) -> None:
    agent = build_agent(Payments(tmp_path / "p.db"), [])
    with FakeMessagesAPI() as api:
        api.enqueue_error(400, message="messages: roles must alternate")
        api.enqueue_message(says("Fine now."))
        async with running_worker(client, [agent], task_queue, claude=claude(api)):
            handle = await runs.start_run(client, "payer", "hi", task_queue=task_queue)
            await wait_for_state(client, handle.id, "request_invalid")
            status = await cli(cli_env, "status", handle.id)
            assert status.returncode == 0, status.stderr
            assert "request_invalid" in status.stdout and "roles must alternate" in status.stdout
            assert "sent unchanged, it fails again" in status.stdout
            assert f"send it again: waypoint resume {handle.id}" in status.stdout
            resumed = await cli(cli_env, "resume", handle.id)
            assert resumed.returncode == 0, resumed.stderr
            assert "its model step is sent again" in resumed.stdout
            assert (await handle.result()).output == "Fine now."


async def test_watch_and_resume_print_text_and_json_only_when_asked(
    client: Client, task_queue: str, cli_env: dict[str, str]
) -> None:
    payments = Payments(Path(cli_env["WAYPOINT_TEST_PAYMENTS"]))
    async with payer_run(client, task_queue, payments, limits=Limits(max_turns=1)) as handle:
        await wait_for_state(client, handle.id, "limit_reached")
        resumed = await cli(cli_env, "resume", handle.id, "--max-turns", "2")
        assert resumed.returncode == 0, resumed.stderr
        assert f"limits raised for {handle.id} (limit_reached): max_turns=2\n" == resumed.stdout
        await wait_for_state(client, handle.id, "awaiting_approval")
        resumed = await cli(cli_env, "resume", handle.id, "--max-turns", "5", "--json")
        assert resumed.returncode == 0, resumed.stderr
        assert json.loads(resumed.stdout)["limits"]["max_turns"] == 5

        watch = spawn(cli_env, "watch", handle.id)
        try:
            assert watch.stdout is not None
            seen = await asyncio.wait_for(
                asyncio.to_thread(read_until, watch.stdout, "approve:"), 60
            )
            await runs.approve(client, handle.id, "t2.tool.1.pay", reviewer="ann")
            rest, errors = await asyncio.to_thread(watch.communicate, timeout=60)
        finally:
            if watch.poll() is None:
                stop(watch)
    assert watch.returncode == 0, errors
    assert '{"payee": "ada", "amount": 5}' in seen, seen
    assert "{'" not in seen + rest, seen + rest
    assert re.search(r"ended\s+done", rest), rest
    assert payments.count() == 1


def read_until(stream: IO[str], needle: str) -> str:
    """Lines from `stream` up to and including the first holding `needle`."""
    seen = ""
    while needle not in seen:
        line = stream.readline()
        assert line, f"the stream ended before {needle!r}: {seen}"
        seen += line
    return seen
