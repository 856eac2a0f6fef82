"""The harnesses on agents a user writes (`tests/harness_app.py`): a question, a sub-agent's
effect, a slow first read, a kill point that cannot come.

Each fails at once with a line that names what is missing or where the run is, leaves no run
behind, and says which timeouts it imposed.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from tests import harness_app
from tests.conftest import wait_for_visibility
from tests.test_operator_truth import cli
from waypoint.testing import (
    KILL_TEST_OPTIONS,
    KillPoint,
    KillReport,
    KillTestError,
    run_kill_test,
)

ROOT = Path(__file__).parent.parent
APP = "tests.harness_app:agents"


@pytest.fixture
def harness_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The app's folder, for the workers (their env) and for `count_effects` here."""
    folder = tmp_path / "harness"
    folder.mkdir()
    monkeypatch.setenv("HARNESS_DIR", str(folder))
    return folder


def worker_env(env: WorkflowEnvironment, folder: Path) -> dict[str, str]:
    return {
        "TEMPORAL_ADDRESS": env.client.service_client.config.target_host,
        "HARNESS_DIR": str(folder),
        "PYTHONPATH": str(ROOT),
    }


TASKS = {"delegator": "delegate", "cold_reader": "read"}
"""What the harness app's agents are asked in a kill test."""


async def harness_kill_test(
    client: Client,
    env: WorkflowEnvironment,
    harness_dir: Path,
    task_queue: str,
    agent: str,
    kill_points: list[KillPoint],
    workdir: str = "killtest",
    **more: Any,
) -> KillReport:
    """`run_kill_test` of the harness app's `agent`, counting its notes; `more` as it takes."""
    return await run_kill_test(
        client,
        app=APP,
        agent=agent,
        task=TASKS[agent],
        task_queue=task_queue,
        workdir=harness_dir / workdir,
        kill_points=kill_points,
        count_effects=harness_app.count_effects,
        env=worker_env(env, harness_dir),
        **more,
    )


async def open_runs(client: Client, agent: str) -> int:
    query = f"WaypointAgent = '{agent}' AND ExecutionStatus = 'Running'"
    return len([w async for w in client.list_workflows(query)])


async def test_torture_without_an_answer_stops_at_once_names_it_and_leaves_no_run(
    client: Client, cli_env: dict[str, str], harness_dir: Path
) -> None:
    env = {**cli_env, "HARNESS_DIR": str(harness_dir)}
    # Other tests on this session's server terminate `asker` runs of their own: count from here.
    terminated = "WaypointAgent = 'asker' AND ExecutionStatus = 'Terminated'"
    before = (await client.count_workflows(terminated)).count
    flags = ["--app", APP, "--agent", "asker", "--task", "ask", "--kills", "1", "--seeds", "1"]
    flags += ["--count-effects", "tests.harness_app:count_effects"]
    began = time.monotonic()
    stopped = await cli(env, "torture", *flags)
    took = time.monotonic() - began
    assert stopped.returncode == 1, stopped.stdout + stopped.stderr
    assert "Traceback" not in stopped.stderr, stopped.stderr
    line = stopped.stderr.strip()
    assert "waits for an answer to ask_user" in line, line
    assert "--answer ask_user=" in line and '"choice"' in line, line  # the answer's shape
    assert "of the uninterrupted run" in line, line
    assert took < 60, f"took {took:.0f}s: it waited instead of failing fast"
    assert "timeouts imposed: model call 2s, tool 2s" in stopped.stdout, stopped.stdout
    await wait_for_visibility(client, terminated, before + 1)
    assert await open_runs(client, "asker") == 0

    answered = await cli(env, "torture", *flags, "--answer", 'ask_user={"choice": "red"}')
    assert answered.returncode == 0, answered.stdout + answered.stderr
    assert "seed 1: OK" in answered.stdout, answered.stdout
    assert "'t2.tool.1.note': 1" in answered.stdout, answered.stdout  # the effect, counted


async def test_a_sub_agents_effect_is_counted_under_its_own_key(
    client: Client, env: WorkflowEnvironment, harness_dir: Path, task_queue: str
) -> None:
    report = await harness_kill_test(
        client, env, harness_dir, task_queue, "delegator", [KillPoint.after_step("t1.model")]
    )
    assert report.ok, report.summary()
    assert report.effect_counts == {"t1.tool.1.errand > t1.tool.1.note": 1}, report.summary()


async def test_a_kill_point_the_run_cannot_reach_fails_at_once_naming_it(
    client: Client, env: WorkflowEnvironment, harness_dir: Path, task_queue: str
) -> None:
    began = time.monotonic()
    with pytest.raises(KillTestError) as caught:
        await harness_kill_test(
            client,
            env,
            harness_dir,
            task_queue,
            "cold_reader",
            [KillPoint.after_step("t5.tool.1.never")],
            timeout=120,
        )
    message = str(caught.value)
    assert "cannot reach kill point 1 (after t5.tool.1.never) of the killed run" in message
    assert "it is done" in message or "it ended completed" in message, message
    assert time.monotonic() - began < 60, message


async def test_a_retry_the_harness_caused_is_named_with_the_timeout_it_imposed(
    client: Client, env: WorkflowEnvironment, harness_dir: Path, task_queue: str
) -> None:
    assert harness_app.COLD_SECONDS > KILL_TEST_OPTIONS.tool_timeout.total_seconds()
    report = await harness_kill_test(client, env, harness_dir, task_queue, "cold_reader", [])
    summary = report.summary()
    assert report.ok, summary  # retries are Temporal's own, not steps run again
    assert report.retried["reference t1.tool.1.cold_read"] >= 2, summary
    assert "t1.tool.1.cold_read" in report.failed, summary  # every cold try timed out
    assert "failed on every try: t1.tool.1.cold_read" in summary, summary
    assert "timeouts imposed: model call 2s, tool 2s" in summary, summary

    # still cold; a longer tool timeout lets the first try through
    slow = KILL_TEST_OPTIONS.model_copy(
        update={"tool_timeout": KILL_TEST_OPTIONS.model_timeout * 3}
    )
    again = await harness_kill_test(
        client,
        env,
        harness_dir,
        f"{task_queue}-slow",
        "cold_reader",
        [],
        workdir="killtest-slow",
        options=slow,
    )
    assert (again.retried, again.failed) == ({}, {}), again.summary()
    assert "tool 6s" in again.summary()


async def test_killtest_takes_your_own_agent_and_its_answers(
    cli_env: dict[str, str], harness_dir: Path
) -> None:
    env = {**cli_env, "HARNESS_DIR": str(harness_dir)}
    done = await cli(
        env,
        "killtest",
        "--app",
        APP,
        "--agent",
        "asker",
        "--task",
        "ask",
        "--count-effects",
        "tests.harness_app:count_effects",
        "--answer",
        'ask_user={"choice": "blue"}',
        "--kills",
        "1",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[0].endswith("kills, OK"), done.stdout
    assert "'t2.tool.1.note': 1" in done.stdout, done.stdout
    half = await cli(env, "killtest", "--app", APP, "--agent", "asker")
    assert half.returncode == 1
    assert half.stderr.strip().endswith("your own agent needs --task, --count-effects as well")
