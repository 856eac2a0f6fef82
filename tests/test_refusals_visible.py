"""A refused signal stays visible: a finished run's `status` and `ledger` say what was refused.

A raw `temporal workflow signal` gets no answer; the run records why it did nothing. Once the
run has ended no worker answers for it, so what it refused must be in what Temporal keeps.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
from pathlib import Path

from temporalio.client import Client

from tests.conftest import TEMPORAL
from tests.support.payer import open_payer
from tests.test_cli import cli_env, waypoint  # noqa: F401 - the fixture is used by name
from waypoint.client import runs
from waypoint.client.views import describe, memo
from waypoint.protocol import MEMO_KEY


async def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    proc = await asyncio.to_thread(waypoint, env, *args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def raw_signal(env: dict[str, str], run: str, name: str, payload: object) -> None:
    """`temporal workflow signal`, as a person with only Temporal's CLI sends it."""
    subprocess.run(
        [str(TEMPORAL), "workflow", "signal", "--workflow-id", run, "--name", name]
        + ["--input", json.dumps(payload), "--address", env["TEMPORAL_ADDRESS"]],
        check=True,
        capture_output=True,
        timeout=30,
    )


async def test_refused_signal_shows_in_status_and_ledger_after_the_run_ends(
    client: Client,
    task_queue: str,
    cli_env: dict[str, str],  # noqa: F811
) -> None:
    correction = {"step_id": "t2.tool.1.pay", "result": "paid already", "reviewer": "kim"}
    db = Path(cli_env["WAYPOINT_TEST_PAYMENTS"])
    async with open_payer(client, task_queue, db, approval=True, until="awaiting_approval") as run:
        handle = run.handle
        raw_signal(cli_env, handle.id, "correct", correction)
        for _ in range(200):
            if (await runs.status(client, handle.id)).ignored_signals:
                break
            await asyncio.sleep(0.05)
        await runs.approve(client, handle.id, "t2.tool.1.pay", reviewer="me")
        assert (await handle.result()).output == "Paid ada 5."
    run = handle.id  # no worker from here on: what follows is answered by Temporal alone

    shown = json.loads((await cli(cli_env, "status", run, "--json")).stdout)
    assert shown["answered_by"] == "memo" and shown["state"] == "done"
    (refused,) = shown["ignored_signals"]
    assert (refused["signal"], refused["step_id"]) == ("correct", "t2.tool.1.pay")
    assert "awaiting approval" in refused["reason"]
    assert shown["ignored_dropped"] == 0

    text = (await cli(cli_env, "status", run)).stdout
    assert re.search(r"ignored\s+correct t2\.tool\.1\.pay: .*awaiting approval", text), text

    ledger = (await cli(cli_env, "ledger", run)).stdout
    assert "t2.tool.1.pay" in ledger
    refusals = ledger.split("refused signals")[1]
    assert "correct t2.tool.1.pay" in refusals and "awaiting approval" in refusals, ledger


async def test_a_finished_runs_memo_keeps_a_bounded_list_of_refusals(
    client: Client,
    task_queue: str,
    cli_env: dict[str, str],  # noqa: F811
) -> None:
    unknown = [f"t9.tool.{n}.{'x' * 300}" for n in range(8)]  # steps it never had, at length
    db = Path(cli_env["WAYPOINT_TEST_PAYMENTS"])
    async with open_payer(client, task_queue, db, approval=True, until="awaiting_approval") as run:
        handle = run.handle
        for step in unknown:
            await handle.signal("correct", {"step_id": step, "result": "?"})
        for _ in range(200):
            if len((await runs.status(client, handle.id)).ignored_signals) == 8:
                break
            await asyncio.sleep(0.05)
        await runs.approve(client, handle.id, "t2.tool.1.pay", reviewer="me")
        await handle.result()
    description = await describe(client, handle.id)
    kept = await memo(description)
    assert kept is not None and kept.state == "done"
    assert 0 < len(kept.ignored_signals) < 8
    assert kept.ignored_dropped == 8 - len(kept.ignored_signals)
    assert kept.ignored_signals[-1].step_id.startswith("t9.tool.7.")
    listed = json.dumps([i.model_dump(mode="json") for i in kept.ignored_signals])
    assert len(listed) < 800, listed  # short reasons: a few lines, not what was sent
    assert all(len(i.reason) <= 120 and i.reason.endswith("…") for i in kept.ignored_signals)
    size = len(description.raw_description.workflow_execution_info.memo.fields[MEMO_KEY].data)
    assert size < 4096, f"the memo is {size} bytes"  # Temporal refuses one above 32 KB
    shown = json.loads((await cli(cli_env, "status", handle.id, "--json")).stdout)
    assert shown["ignored_dropped"] == 8 - len(shown["ignored_signals"])
    text = (await cli(cli_env, "status", handle.id)).stdout
    assert f"and {kept.ignored_dropped} earlier ignored signals" in text, text
