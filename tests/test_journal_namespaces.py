"""The attempt journal where workers really run: each worker in a pid namespace of its own.

A restarted container gets a new pid namespace; a sidecar sees the host's `/proc` from its own.
Workers here are real `waypoint worker` processes started with `unshare --pid` (root only: the
tests skip with the reason elsewhere), sharing one journal folder as a pod's volume would.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from tests import harness_app
from tests.conftest import wait_until
from tests.test_attempt_journal import journaling_env, noting
from waypoint._activities.journal import WORKER_DIED
from waypoint.protocol import RunResult
from waypoint.testing.namespaces import NamespacedWorker, why_not

pytestmark = [pytest.mark.slow, pytest.mark.skipif(bool(why_not()), reason=why_not() or "runs")]


def worker(
    env: WorkflowEnvironment, task_queue: str, tmp_path: Path, name: str, **how: object
) -> NamespacedWorker:
    """A worker of the harness's agents in a pid namespace, journaling in `tmp_path/attempts`."""
    settings = journaling_env(
        env, task_queue, tmp_path / "attempts", HARNESS_DIR=str(tmp_path / "harness")
    )
    return NamespacedWorker(
        "tests.harness_app:agents",
        settings,
        tmp_path / f"{name}.log",
        **how,  # type: ignore[arg-type]
    )


async def killed_mid_note(
    client: Client,
    task_queue: str,
    harness: Path,
    killed: NamespacedWorker,
    restarted: NamespacedWorker,
) -> WorkflowHandle:
    """Start a note on `killed` and kill that mid-effect; let the note go on; start `restarted`."""
    killed.start()
    handle = await noting(client, task_queue, harness)
    killed.kill()
    (harness / "hold").unlink()
    restarted.start()
    return handle


async def note_attempts(handle: WorkflowHandle) -> list[tuple[int, str]]:
    """The note step's attempt that completed, and the failure type of the one before it.

    Temporal records a retried step's last attempt alone, with the failure that ended the one
    before it."""
    notes: set[int] = set()
    found = []
    async for event in handle.fetch_history_events():
        if event.HasField("activity_task_scheduled_event_attributes"):
            if ".tool.1.note#" in event.activity_task_scheduled_event_attributes.activity_id:
                notes.add(event.event_id)
        elif event.HasField("activity_task_started_event_attributes"):
            started = event.activity_task_started_event_attributes
            if started.scheduled_event_id in notes:
                found.append((started.attempt, started.last_failure.application_failure_info.type))
    return found


def one_row(result: RunResult) -> None:
    """The run ended as it should, its effect written once."""
    assert result.state == "done" and result.output == "Noted.", result
    note = next(r for r in result.ledger if r.tool == "note")
    assert note.effect_key and harness_app.count_effects(note.effect_key) == 1


@pytest.fixture
def harness(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "harness"
    folder.mkdir()
    monkeypatch.setenv("HARNESS_DIR", str(folder))
    (folder / "hold").touch()
    return folder


async def test_a_pid_naming_a_dead_host_process_frees_no_live_attempt(
    client: Client, env: WorkflowEnvironment, task_queue: str, tmp_path: Path, harness: Path
) -> None:
    """The issue's reproduction: A's pid in its namespace is a host process's that then ends,
    and B starts in A's namespace, both seeing the host's `/proc`. B must leave A's attempt be:
    a retry beside A's running body writes the row twice."""
    host = subprocess.Popen(["sleep", "600"])
    a = worker(env, task_queue, tmp_path, "a", own_proc=False, pid=host.pid)
    b = worker(env, task_queue, tmp_path, "b", own_proc=False, join=a)
    try:
        a.start()
        handle = await noting(client, task_queue, harness)
        host.kill()
        host.wait()  # "no /proc/PID": A's pid names no process in the /proc both see
        b.start()  # done with the journal before it says it polls
        (harness / "hold").unlink()
        one_row(await asyncio.wait_for(handle.result(), 30))
        assert await note_attempts(handle) == [(1, "")]  # A's attempt was never failed beside it
    finally:
        host.kill()
        host.wait()
        b.kill()
        a.kill()


@pytest.mark.parametrize("own_proc", [True, False], ids=["own-proc", "host-proc"])
async def test_a_worker_restarted_in_a_new_namespace_frees_its_predecessors_attempt(
    client: Client,
    env: WorkflowEnvironment,
    task_queue: str,
    tmp_path: Path,
    harness: Path,
    own_proc: bool,
) -> None:
    """A container restart: the same volume, a new pid namespace; retried within seconds, not
    after the 30 s heartbeat timeout, and written once. The dead folder goes once settled."""
    killed = worker(env, task_queue, tmp_path, "killed", own_proc=own_proc)
    restarted = worker(env, task_queue, tmp_path, "restarted", own_proc=own_proc)
    try:
        handle = await killed_mid_note(client, task_queue, harness, killed, restarted)
        one_row(await asyncio.wait_for(handle.result(), 20))  # well before the 30 s timeout
        assert await note_attempts(handle) == [(2, WORKER_DIED)]  # freed by the journal
        (boot,) = (tmp_path / "attempts").glob("*/*")
        assert len(list(boot.iterdir())) == 2  # the restarted worker's folder and lock alone
    finally:
        restarted.kill()
        killed.kill()


async def test_a_killed_worker_its_init_has_not_reaped_is_freed(
    client: Client, env: WorkflowEnvironment, task_queue: str, tmp_path: Path, harness: Path
) -> None:
    """A zombie: killed while its namespace's init is stopped, so nobody reaps it. Its pid and
    `/proc` entry stay; its lock went with its death, and the restart frees its attempt."""
    killed = worker(env, task_queue, tmp_path, "zombie")
    restarted = worker(env, task_queue, tmp_path, "restarted")
    try:
        killed.start()
        handle = await noting(client, task_queue, harness)
        init, pid = killed.init_pid(), killed.worker_pid()
        os.kill(init, signal.SIGSTOP)
        os.kill(pid, signal.SIGKILL)

        async def zombie() -> bool:
            return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] == "Z"

        await wait_until(zombie, "the killed worker a zombie")
        (harness / "hold").unlink()
        restarted.start()
        one_row(await asyncio.wait_for(handle.result(), 20))
        assert await note_attempts(handle) == [(2, WORKER_DIED)]
        assert Path(f"/proc/{pid}").exists()  # still unreaped all along
        os.kill(init, signal.SIGCONT)
    finally:
        restarted.kill()
        killed.kill()


async def test_a_read_only_journal_volume_frees_what_it_can_prove_and_fails_no_step(
    client: Client, env: WorkflowEnvironment, task_queue: str, tmp_path: Path, harness: Path
) -> None:
    """The volume came back read-only: a lock can still be taken, so the killed worker's attempt
    is freed; the new worker notes nothing of its own, runs its steps, and says why."""
    killed = worker(env, task_queue, tmp_path, "killed")
    (tmp_path / "attempts").mkdir()
    restarted = worker(env, task_queue, tmp_path, "ro", read_only=tmp_path / "attempts")
    try:
        handle = await killed_mid_note(client, task_queue, harness, killed, restarted)
        assert "attempt journal off" in restarted.log_path.read_text()
        one_row(await asyncio.wait_for(handle.result(), 20))
        assert await note_attempts(handle) == [(2, WORKER_DIED)]
    finally:
        restarted.kill()
        killed.kill()
