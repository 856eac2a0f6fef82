"""A restarted worker frees a killed one's attempts at once, and only a provably dead one's (32.3).

Without the journal a SIGKILLed worker's tool waits out its heartbeat timeout (30 s here) before
Temporal retries it; with it, the next worker fails that attempt by its task token as it starts.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import errno
import os
import shutil
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from unittest import mock

import pytest
from temporalio.client import Client
from temporalio.testing import ActivityEnvironment, WorkflowEnvironment

from tests import harness_app
from tests.conftest import running_worker, wait_until
from waypoint.activities.journal import AttemptJournal, provably_gone, start_time
from waypoint.activities.model import ModelActivities
from waypoint.client import runs
from waypoint.protocol import ModelRequest, ModelResponse, PartialSpend, TextBlock, Usage
from waypoint.testing import KILL_TEST_OPTIONS, WorkerProcess
from waypoint.testing.kill_test import TASK_TIMEOUT

ROOT = Path(__file__).parent.parent
SLOW_TO_NOTICE = KILL_TEST_OPTIONS.model_copy(
    update={
        "tool_timeout": timedelta(seconds=60),
        "tool_heartbeat_timeout": timedelta(seconds=30),
    }
)
"""A killed tool Temporal itself would retry only 30 s after its worker died."""


def journaling_worker(
    env: WorkflowEnvironment, task_queue: str, journal: Path, tmp_path: Path, **extra: str
) -> WorkerProcess:
    """A `waypoint worker` of the harness's agents, scripted, noting its attempts in `journal`."""
    return WorkerProcess(
        "tests.harness_app:agents",
        {
            **{k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC")},
            "TEMPORAL_ADDRESS": env.client.service_client.config.target_host,
            "WAYPOINT_TASK_QUEUE": task_queue,
            "WAYPOINT_ATTEMPT_JOURNAL": str(journal),
            "PYTHONPATH": str(ROOT),
            **extra,
        },
        tmp_path / "worker.log",
    )


def test_a_process_is_gone_only_when_its_pid_runs_no_more_with_that_start_time() -> None:
    pid = os.getpid()
    started = start_time(pid)
    assert started is not None and not provably_gone(pid, started)
    assert provably_gone(pid, str(int(started) + 1))  # the pid reused by a later process
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert provably_gone(child.pid, started)  # reaped: no such process


async def test_a_live_processs_attempts_are_never_freed(client: Client, tmp_path: Path) -> None:
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        started = start_time(alive.pid)
        assert started is not None
        folder = AttemptJournal(tmp_path, client).folder / f"{alive.pid}-{started}"
        folder.mkdir(parents=True)
        (folder / "attempt").write_bytes(base64.b64encode(b"not a real token"))
        assert await AttemptJournal(tmp_path, client).free_dead(client) == 0
        assert (folder / "attempt").exists()  # left to its heartbeat timeout
    finally:
        alive.kill()
        alive.wait()
    freed = await AttemptJournal(tmp_path, client).free_dead(client)
    assert freed == 0 and not folder.exists()  # gone: the server refused its token


@pytest.mark.slow
async def test_a_tool_a_killed_worker_was_running_is_retried_as_the_next_worker_starts(
    client: Client,
    env: WorkflowEnvironment,
    task_queue: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    folder, journal = tmp_path / "harness", tmp_path / "attempts"
    folder.mkdir()
    monkeypatch.setenv("HARNESS_DIR", str(folder))
    (folder / "hold").touch()
    killed = journaling_worker(env, task_queue, journal, tmp_path, HARNESS_DIR=str(folder))
    try:
        killed.start()
        handle = await runs.start_run(
            client,
            "helper",
            "note it",
            task_queue=task_queue,
            options=SLOW_TO_NOTICE,
            task_timeout=TASK_TIMEOUT,
        )

        async def noting() -> bool:
            return (folder / "holding").exists()

        await wait_until(noting, "the note started on the worker about to be killed")
        noted = sorted(p.suffix for p in journal.glob("*/*/*-*/*"))
        assert noted == ["", ".run"]  # the attempt it is running, and its run beside it
        killed.kill()
    finally:
        killed.kill()
    (folder / "hold").unlink()
    agents = harness_app.agents()
    async with running_worker(client, agents, task_queue, attempt_journal=journal):
        result = await asyncio.wait_for(handle.result(), 20)  # well before the 30 s timeout
    assert result.state == "done" and result.output == "Noted."
    note = next(r for r in result.ledger if r.tool == "note")
    assert note.effect_key and harness_app.count_effects(note.effect_key) == 1
    ours = AttemptJournal(journal, client)
    assert [p.name for p in ours.folder.iterdir()] == [ours.mine.name]  # the dead one's gone


@pytest.mark.slow
async def test_a_model_step_a_killed_worker_was_running_is_retried_as_the_next_worker_starts(
    client: Client, env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    journal, step_log = tmp_path / "attempts", tmp_path / "steps.log"
    options = KILL_TEST_OPTIONS.model_copy(
        update={
            "model_timeout": timedelta(seconds=120),
            "model_heartbeat_timeout": timedelta(seconds=30),
        }
    )
    killed = journaling_worker(
        env,
        task_queue,
        journal,
        tmp_path,
        WAYPOINT_SCRIPTED_LATENCY="60",  # a model step still in flight when killed
        WAYPOINT_STEP_LOG=str(step_log),
        HARNESS_DIR=str(tmp_path),
    )
    try:
        killed.start()
        handle = await runs.start_run(
            client,
            "cold_reader",
            "read",
            task_queue=task_queue,
            options=options,
            task_timeout=TASK_TIMEOUT,
        )

        async def calling() -> bool:
            return step_log.exists() and "t1.model" in step_log.read_text()

        await wait_until(calling, "the model step started on the worker about to be killed")

        async def noted() -> bool:
            return any(journal.rglob("*.spent"))

        await wait_until(noted, "the model step kept what it had spent beside its attempt")
        killed.kill()
    finally:
        killed.kill()
    (kept,) = journal.rglob("*.spent")
    cut = PartialSpend.model_validate_json(kept.read_text())
    assert cut.known and cut.usage.input_tokens > 0
    async with running_worker(client, harness_app.agents(), task_queue, attempt_journal=journal):
        result = await asyncio.wait_for(handle.result(), 20)  # well before the 30 s timeout
    assert result.state == "done" and result.output == "Read."
    (model,) = [r for r in result.ledger if r.step_id == "t1.model"]
    # The call the kill cut short is billed with the answer: its input read twice, in all.
    assert model.tokens >= 2 * cut.usage.input_tokens, (model.tokens, cut)


async def test_another_process_spaces_attempts_are_never_judged(
    client: Client, tmp_path: Path
) -> None:
    """A container (or a machine) sharing the folder numbers its processes afresh."""
    ours = AttemptJournal(tmp_path, client)
    theirs = ours.folder.parent / "0a1b2c3d.4026530000" / "999999-1"  # no such pid here
    theirs.mkdir(parents=True)
    (theirs / "attempt").write_bytes(base64.b64encode(b"their token"))
    assert await ours.free_dead(client) == 0 and (theirs / "attempt").exists()


async def test_a_folder_another_starting_worker_removed_is_passed_over(
    client: Client, tmp_path: Path
) -> None:
    """Two workers starting at once both find a dead folder; the second finds it gone."""
    journal = AttemptJournal(tmp_path, client)
    dead = journal.folder / "999999-12345"
    dead.mkdir(parents=True)
    (dead / "attempt").write_bytes(base64.b64encode(b"a token"))

    def removed_meanwhile(pid: int, started: str) -> bool:
        shutil.rmtree(dead)  # the other worker, just now
        return True

    with mock.patch("waypoint.activities.journal.provably_gone", removed_meanwhile):
        assert await journal.free_dead(client) == 0


def test_a_disk_gone_read_only_fails_no_step(tmp_path: Path) -> None:
    """The step has run (an effect done, a call paid): the journal must not fail it after."""
    journal = AttemptJournal(tmp_path)
    read_only = OSError(errno.EROFS, "Read-only file system")
    with (
        mock.patch.object(Path, "write_bytes", side_effect=read_only),
        mock.patch.object(Path, "unlink", side_effect=read_only),
        journal.running(b"a token"),
    ):
        pass


def test_an_entry_holds_the_token_alone_and_its_run_in_a_sidecar(tmp_path: Path) -> None:
    """Any build's reader decodes an entry as a token: what a later build adds goes beside it."""
    journal = AttemptJournal(tmp_path)
    info = mock.Mock(workflow_id="wf-1", workflow_run_id="run-1")
    with mock.patch("waypoint.activities.journal.activity.info", return_value=info):
        with journal.running(b"a token"):
            (entry,) = [p for p in journal.mine.iterdir() if not p.suffix]
            assert base64.b64decode(entry.read_text(), validate=True) == b"a token"
            assert entry.with_suffix(".run").read_text() == "wf-1\nrun-1"
    assert list(journal.mine.iterdir()) == []  # the entry and its sidecars go with the attempt


async def test_a_retry_keeps_the_cut_attempts_spend_before_it_reports_its_own(
    tmp_path: Path,
) -> None:
    """Attempt 2 of a freed model step notes attempt 1's spend at once: killed before its own
    first report, attempt 3 would otherwise bill nothing for attempt 1."""
    earlier = PartialSpend(usage=Usage(input_tokens=1234), cost_usd=0.01, known=True, attempt=1)
    journal = AttemptJournal(tmp_path)
    answer = asyncio.Event()

    class Silent:  # a provider that says nothing until it answers
        async def complete(self, request: ModelRequest) -> ModelResponse:
            await answer.wait()
            return ModelResponse(content=[TextBlock(text="ok")], stop_reason="end_turn", model="m")

    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, attempt=2, heartbeat_details=[earlier])
    request = ModelRequest(
        step_id="t1.model", turn=1, model="m", provider="scripted", agent="a", system="",
        tools=[], messages=[], max_tokens=10, purpose="compact",
    )  # fmt: skip
    activities = ModelActivities({"scripted": Silent()})  # type: ignore[dict-item]
    with journal.running(b"a token"):
        calling = asyncio.create_task(env.run(activities.call_model, request))

        async def noted() -> bool:
            return any(journal.mine.glob("*.spent"))

        await wait_until(noted, "attempt 2 kept attempt 1's spend beside its entry")
        (kept,) = journal.mine.glob("*.spent")
        assert PartialSpend.model_validate_json(kept.read_text()) == earlier
        answer.set()
        response = await calling
    assert response.usage.input_tokens == 1234 and response.attempt == 2  # billed with it
