"""A restarted worker frees a killed one's attempts at once, and only a provably dead one's (32.3).

Without the journal a SIGKILLed worker's tool waits out its heartbeat timeout (30 s here) before
Temporal retries it; with it, the next worker fails that attempt by its task token as it starts,
once it holds the dead process's lock. Workers in pid namespaces of their own:
tests/test_journal_namespaces.py.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import errno
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from unittest import mock

import pytest
from temporalio.client import Client, WorkflowHandle
from temporalio.testing import ActivityEnvironment, WorkflowEnvironment

from tests import harness_app
from tests.conftest import running_worker, wait_until
from waypoint._activities.journal import AttemptJournal
from waypoint._activities.model import ModelActivities
from waypoint.client import runs
from waypoint.protocol import (
    ModelRequest,
    ModelResponse,
    PartialSpend,
    StepOptions,
    TextBlock,
    Usage,
)
from waypoint.testing import KILL_TEST_OPTIONS, WorkerProcess
from waypoint.testing.report import TASK_TIMEOUT

ROOT = Path(__file__).parent.parent
SLOW_TO_NOTICE = KILL_TEST_OPTIONS.model_copy(
    update={
        "tool_timeout": timedelta(seconds=60),
        "tool_heartbeat_timeout": timedelta(seconds=30),
    }
)
"""A killed tool Temporal itself would retry only 30 s after its worker died."""


def journaling_env(
    env: WorkflowEnvironment, task_queue: str, journal: Path, **extra: str
) -> dict[str, str]:
    """What a scripted worker of the harness's agents runs with, noting attempts in `journal`."""
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC")},
        "TEMPORAL_ADDRESS": env.client.service_client.config.target_host,
        "WAYPOINT_TASK_QUEUE": task_queue,
        "WAYPOINT_ATTEMPT_JOURNAL": str(journal),
        "PYTHONPATH": str(ROOT),
        **extra,
    }


def journaling_worker(
    env: WorkflowEnvironment, task_queue: str, journal: Path, tmp_path: Path, **extra: str
) -> WorkerProcess:
    """A `waypoint worker` of the harness's agents, scripted, noting its attempts in `journal`."""
    settings = journaling_env(env, task_queue, journal, **extra)
    return WorkerProcess("tests.harness_app:agents", settings, tmp_path / "worker.log")


async def started_until(
    client: Client,
    task_queue: str,
    agent: str,
    options: StepOptions,
    seen: Callable[[], bool],
    what: str,
) -> WorkflowHandle:
    """Start `agent` on its harness task (a worker killed takes a workflow task along for
    `TASK_TIMEOUT`), and wait until `seen` says `what` happened."""
    task = {"helper": "note it", "cold_reader": "read"}[agent]
    handle = await runs.start_run(
        client, agent, task, task_queue=task_queue, options=options, task_timeout=TASK_TIMEOUT
    )

    async def happened() -> bool:
        return seen()

    await wait_until(happened, what)
    return handle


async def noting(client: Client, task_queue: str, harness: Path) -> WorkflowHandle:
    """Start a run whose one effect holds (its row not yet written) until `harness/hold` goes."""
    held = (harness / "holding").exists
    return await started_until(
        client, task_queue, "helper", SLOW_TO_NOTICE, held, "the note started"
    )


HOLDER = """
import sys, time
from pathlib import Path
from waypoint._activities.journal import AttemptJournal
journal = AttemptJournal(Path(sys.argv[1]))
with journal.running(b"not a real token"):
    print(journal.mine, flush=True)
    time.sleep(60)
"""
"""A process that runs one attempt (its token the server's nonsense) until it is killed."""


def holding(journal: Path) -> tuple[subprocess.Popen[str], Path]:
    """A process running an attempt noted in `journal`, and its folder there."""
    process = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(journal)], stdout=subprocess.PIPE, text=True
    )
    assert process.stdout is not None
    with process.stdout:
        return process, Path(process.stdout.readline().strip())


async def test_a_live_processs_attempts_are_never_freed_a_dead_ones_folder_goes(
    client: Client, tmp_path: Path
) -> None:
    alive, folder = holding(tmp_path)
    try:
        (entry,) = folder.iterdir()
        assert await AttemptJournal(tmp_path).free_dead(client) == 0
        assert entry.exists()  # left to its heartbeat timeout
    finally:
        alive.kill()
        alive.wait()
    assert await AttemptJournal(tmp_path).free_dead(client) == 0  # the server refused it
    assert list(folder.parent.iterdir()) == []  # settled: its folder and lock removed


async def test_a_killed_worker_not_yet_reaped_is_gone(client: Client, tmp_path: Path) -> None:
    """A zombie holds no lock (the kernel drops it as the process exits), though its `/proc`
    entry, pid and start time all remain until its parent reaps it."""
    zombie, folder = holding(tmp_path)
    try:
        os.kill(zombie.pid, signal.SIGKILL)

        async def unreaped() -> bool:
            return Path(f"/proc/{zombie.pid}/stat").read_text().rpartition(")")[2].split()[0] == "Z"

        await wait_until(unreaped, "the killed process a zombie")
        await AttemptJournal(tmp_path).free_dead(client)
        assert not folder.exists()
    finally:
        zombie.kill()
        zombie.wait()


async def test_every_step_a_worker_takes_has_a_heartbeat_timeout(
    client: Client, task_queue: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker may die after it took a step from the queue but before the step's first line
    (no journal knows it then): its heartbeat timeout, not a 30 s start-to-close, retries it."""
    monkeypatch.setenv("HARNESS_DIR", str(tmp_path))
    async with running_worker(client, harness_app.agents(), task_queue):
        handle = await runs.start_run(client, "asker", "ask", task_queue=task_queue)

        async def asked() -> bool:
            return (await runs.status(client, handle.id)).state == "awaiting_answer"

        await wait_until(asked, "the run waits for its client tool's answer")
        await handle.terminate("seen enough")
    timeouts = {
        e.activity_task_scheduled_event_attributes.activity_type.name: (
            e.activity_task_scheduled_event_attributes.heartbeat_timeout.ToTimedelta()
        )
        async for e in handle.fetch_history_events()
        if e.HasField("activity_task_scheduled_event_attributes")
    }
    assert {"waypoint.load_spec", "waypoint.call_model", "waypoint.prepare_tool"} <= set(timeouts)
    assert timeouts["waypoint.prepare_tool"] == timedelta(seconds=10), timeouts
    assert all(timedelta(0) < t <= timedelta(seconds=60) for t in timeouts.values()), timeouts


async def test_another_boots_attempts_are_never_judged(client: Client, tmp_path: Path) -> None:
    """Another node (or a sandbox with a kernel of its own) sharing the disk: its locks are its
    kernel's word, not ours, even where ours can take them."""
    ours = AttemptJournal(tmp_path, client)
    theirs = ours.folder.parent / "0a1b2c3d-0000-4000-8000-000000000000"
    (theirs / "abc").mkdir(parents=True)
    (theirs / "abc.lock").touch()  # no one here holds it
    (theirs / "abc" / "attempt").write_bytes(base64.b64encode(b"their token"))
    assert await ours.free_dead(client) == 0 and (theirs / "abc" / "attempt").exists()


async def test_a_lock_whose_folder_was_never_made_is_tidied(client: Client, tmp_path: Path) -> None:
    """A process killed between making its lock and its folder, or a lock file a reader took
    before its maker could (the maker then tries a new name): nothing to free, nothing left."""
    journal = AttemptJournal(tmp_path, client)
    journal.folder.mkdir(parents=True)
    (journal.folder / "abc.lock").touch()
    assert await journal.free_dead(client) == 0
    assert list(journal.folder.iterdir()) == []


def test_a_volume_without_locks_turns_the_journal_off_and_fails_no_step(tmp_path: Path) -> None:
    journal = AttemptJournal(tmp_path)
    no_locks = OSError(errno.ENOLCK, "No locks available")
    with mock.patch("waypoint._activities.journal.fcntl.flock", side_effect=no_locks):
        with journal.running(b"a token"):
            pass
    assert journal.mine is None and list(journal.folder.iterdir()) == []  # nothing to misread


async def test_an_ended_attempt_stays_noted_while_its_result_may_be_unreported(
    tmp_path: Path,
) -> None:
    """The SDK reports the result after the attempt's code returns: a kill in between must
    leave the attempt to be freed (torture seed 576's check step waited out its timeout)."""
    journal = AttemptJournal(tmp_path)
    with journal.running(b"a token"):
        pass
    assert journal.mine is not None and list(journal.mine.iterdir())


def test_a_clean_stop_leaves_nothing_behind(tmp_path: Path) -> None:
    journal = AttemptJournal(tmp_path)
    assert journal.open() and journal.mine is not None and journal.mine.is_dir()
    journal.close()
    assert list(journal.folder.iterdir()) == []


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
        handle = await noting(client, task_queue, folder)  # on the worker about to be killed
        # The attempt it is running (and those it reported just before), each with its run.
        noted = [p for p in journal.glob("*/*/*/*") if not p.suffix]
        assert noted and all(p.with_suffix(".run").exists() for p in noted)
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
    # The dead one's folder went once its attempt was settled; the live one's on its clean stop.
    assert list(AttemptJournal(journal, client).folder.iterdir()) == []


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
        handle = await started_until(
            client,
            task_queue,
            "cold_reader",
            options,
            lambda: step_log.exists() and "t1.model" in step_log.read_text(),
            "the model step started on the worker about to be killed",
        )

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


def test_a_disk_gone_read_only_fails_no_step(tmp_path: Path) -> None:
    """The step has run (an effect done, a call paid): the journal must not fail it after."""
    journal = AttemptJournal(tmp_path)
    assert journal.open()
    read_only = OSError(errno.EROFS, "Read-only file system")
    with (
        mock.patch.object(Path, "write_text", side_effect=read_only),
        mock.patch.object(Path, "unlink", side_effect=read_only),
        journal.running(b"a token"),
    ):
        pass


def test_an_entry_holds_the_token_alone_and_its_run_in_a_sidecar(tmp_path: Path) -> None:
    """Any build's reader decodes an entry as a token: what a later build adds goes beside it."""
    journal = AttemptJournal(tmp_path)
    info = mock.Mock(workflow_id="wf-1", workflow_run_id="run-1")
    with mock.patch("waypoint._activities.journal.activity.info", return_value=info):
        with journal.running(b"a token"):
            assert journal.mine is not None
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
    assert journal.open() and journal.mine is not None
    mine = journal.mine
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
            return any(mine.glob("*.spent"))

        await wait_until(noted, "attempt 2 kept attempt 1's spend beside its entry")
        (kept,) = mine.glob("*.spent")
        assert PartialSpend.model_validate_json(kept.read_text()) == earlier
        answer.set()
        response = await calling
    assert response.usage.input_tokens == 1234 and response.attempt == 2  # billed with it
