"""Tools a client answers: the run waits, holding no process, until an answer fits the tool."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowHandle

from tests.cli import wait_for, waypoint
from tests.client_tool_app import Choice, asker, notifications
from tests.conftest import running_worker, wait_for_state
from waypoint._cli import render
from waypoint.client import runs, views
from waypoint.errors import DecisionRefusedError, StepNotPendingError
from waypoint.protocol import ClientAnswer, RunResult, RunStatus
from waypoint.protocol.answer_schema import problems
from waypoint.testing import WorkerProcess

STEP = "t1.tool.1.ask_user"


@asynccontextmanager
async def asked(
    client: Client, task_queue: str, tmp_path: Path, **worker: Any
) -> AsyncIterator[tuple[WorkflowHandle[Any, RunResult], RunStatus]]:
    """A worker for the asker (`worker` are its settings), and its run waiting for an answer."""
    async with running_worker(client, [asker(tmp_path / "notes.db")], task_queue, **worker):
        handle = await runs.start_run(client, "asker", "pick", task_queue=task_queue)
        yield handle, await wait_for_state(client, handle.id, "awaiting_answer")


@pytest.fixture
def asker_env(cli_env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    """What a `waypoint` process runs with, the asker's notes included."""
    return {**cli_env, "WAYPOINT_TEST_NOTES": str(tmp_path / "notes.db")}


async def test_answer_by_update_goes_to_the_model_and_is_recorded(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    async with asked(client, task_queue, tmp_path, max_cached_workflows=0) as (handle, status):
        (question,) = status.pending_questions
        assert question.step_id == STEP
        assert question.arguments == {"question": "Which colour?", "choices": ["red", "blue"]}
        assert question.answer_schema == Choice.model_json_schema()  # the shape to answer in
        sent = await runs.answer(client, handle.id, STEP, {"choice": "red"}, reviewer="ada")
        assert sent.recorded and sent.decision == "answered"
        assert sent.decided_by.startswith("ada")
        result = await handle.result()
    assert result.output == 'User said: {"choice": "red"}'
    step = next(r for r in result.ledger if r.step_id == STEP)
    assert step.status == "completed" and step.decided_by and step.decided_by.startswith("ada")


async def test_a_wrong_answer_is_refused_and_the_run_keeps_waiting(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    async with asked(client, task_queue, tmp_path) as (handle, _):
        with pytest.raises(DecisionRefusedError, match=r"does not fit ask_user's output: choice"):
            await runs.answer(client, handle.id, STEP, {"choice": "green"})
        with pytest.raises(StepNotPendingError, match=rf"t9.tool.1.ask_user.*waiting: {STEP}"):
            await runs.answer(client, handle.id, "t9.tool.1.ask_user", {"choice": "red"})
        # Raw signals (as `temporal workflow signal` sends them) are refused and recorded.
        await handle.signal("answer", ClientAnswer(step_id=STEP, result={"note": "no choice"}))
        await handle.signal("answer", {"step_id": STEP, "result": "red"})
        status = await runs.status(client, handle.id)
        assert status.state == "awaiting_answer" and status.pending_questions
        reasons = [(i.signal, i.step_id, i.reason) for i in status.ignored_signals]
        assert (
            reasons[0][:2] == ("answer", STEP)
            and "'choice' is a required property" in reasons[0][2]
        )
        assert reasons[1][0] == "answer" and "malformed answer payload" in reasons[1][2]
        await runs.answer(client, handle.id, STEP, {"choice": "blue", "note": "darker"})
        result = await handle.result()
    assert result.output == 'User said: {"choice": "blue", "note": "darker"}'


async def test_answer_by_signal_when_no_worker_is_up(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    async with asked(client, task_queue, tmp_path) as (handle, _):
        pass  # the worker stops while the run waits
    seen = await views.view(client, handle.id, ask_worker=False)
    assert seen.memo is not None and seen.memo.state == "awaiting_answer"
    assert [q.step_id for q in seen.memo.pending_questions] == [STEP]
    assert seen.memo.pending_questions[0].answer_schema == Choice.model_json_schema()
    shown = "\n".join(render.status_lines(seen))
    assert f"an answer fits {json.dumps(Choice.model_json_schema())}" in shown
    sent = await runs.answer(client, handle.id, STEP, {"choice": "red"}, reviewer="ada", timeout=1)
    assert not sent.recorded and sent.as_of
    async with running_worker(client, [asker(tmp_path / "notes.db")], task_queue):
        result = await handle.result()
    assert result.output == 'User said: {"choice": "red"}'


async def test_nobody_answers_in_time_and_the_model_is_told(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    agent = asker(tmp_path / "notes.db", timeout=timedelta(seconds=1))
    async with running_worker(client, [agent], task_queue):
        handle = await runs.start_run(client, "asker", "pick", task_queue=task_queue)
        result = await handle.result()
    assert result.output.startswith("No answer: Nobody answered ask_user within 0:00:01")
    step = next(r for r in result.ledger if r.step_id == STEP)
    assert step.status == "error"


async def test_reminders_run_while_the_question_waits(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    notes = tmp_path / "notes.db"
    agent = asker(notes, remind_every=timedelta(milliseconds=500))
    async with running_worker(client, [agent], task_queue):
        handle = await runs.start_run(client, "asker", "pick", task_queue=task_queue)
        for _ in range(400):
            if len(notifications(notes)) >= 2:
                break
            await asyncio.sleep(0.05)
        await runs.answer(client, handle.id, STEP, {"choice": "red"})
        result = await handle.result()
    sent = notifications(notes)
    assert [r for _, r in sent][:2] == [0, 1]
    assert sent[0][0].endswith(f"/{STEP}.escalate.0")
    reminders = [r for r in result.ledger if r.step_id.startswith(f"{STEP}.escalate.")]
    assert len(reminders) == len(sent) and all(r.status == "completed" for r in reminders)
    assert result.output == 'User said: {"choice": "red"}'


async def test_a_waiting_question_survives_a_killed_worker(
    client: Client, task_queue: str, tmp_path: Path, asker_env: dict[str, str]
) -> None:
    worker = WorkerProcess("tests.client_tool_app:agents", asker_env, tmp_path / "worker.log")
    worker.start()
    try:
        handle = await runs.start_run(client, "asker", "pick", task_queue=task_queue)
        await wait_for_state(client, handle.id, "awaiting_answer")
        worker.kill()
        seen = await views.view(client, handle.id, ask_worker=False)
        assert seen.memo is not None and [q.step_id for q in seen.memo.pending_questions] == [STEP]
        worker.start()
        await wait_for_state(client, handle.id, "awaiting_answer", timeout=60)
        await runs.answer(client, handle.id, STEP, {"choice": "blue"})
        result = await handle.result()
    finally:
        worker.kill()
    assert result.output == 'User said: {"choice": "blue"}'
    assert [r.step_id for r in result.ledger] == ["t0.spec", "t1.model", STEP, "t2.model"]


def test_answer_from_the_cli(tmp_path: Path, asker_env: dict[str, str]) -> None:
    cli_env = asker_env
    worker = WorkerProcess("tests.client_tool_app:agents", cli_env, tmp_path / "worker.log")
    worker.start()
    try:
        started = waypoint(cli_env, "start", "asker", "pick")
        assert started.returncode == 0, started.stderr
        run = re.search(r"started (\S+)", started.stdout).group(1)  # type: ignore[union-attr]
        shown = wait_for(cli_env, run, "awaiting_answer")
        assert f"question {STEP} ask_user" in shown
        assert f"answer: waypoint answer {run} {STEP} --json" in shown

        wrong = waypoint(cli_env, "answer", run, STEP, "--json", '{"choice": "green"}')
        assert wrong.returncode == 1 and "does not fit ask_user's output" in wrong.stderr
        unknown = waypoint(cli_env, "answer", run, "t9.tool.1.ask_user", "--json", "{}")
        assert unknown.returncode == 1 and "not waiting for an answer" in unknown.stderr
        not_object = waypoint(cli_env, "answer", run, STEP, "--json", "[1]")
        assert not_object.returncode == 1 and "JSON object" in not_object.stderr
        neither = waypoint(cli_env, "answer", run, STEP)
        assert neither.returncode == 1 and "exactly one of" in neither.stderr

        answer = tmp_path / "answer.json"
        answer.write_text(json.dumps({"choice": "red", "note": "from a file"}))
        done = waypoint(cli_env, "answer", run, STEP, "--file", str(answer), "--reviewer", "ada")
        assert done.returncode == 0, done.stderr
        assert f"answered {STEP}: recorded by ada" in done.stdout
        again = waypoint(cli_env, "answer", run, STEP, "--json", '{"choice": "red"}')
        assert again.returncode == 1
        result = waypoint(cli_env, "result", run)
        assert result.returncode == 0, result.stderr
        assert 'User said: {"choice": "red", "note": "from a file"}' in result.stdout
    finally:
        assert worker.stop() == 0


def test_the_schema_check_covers_what_pydantic_emits() -> None:
    from tests.client_tool_app import Choice, Question

    schema = Question.model_json_schema()
    assert problems(schema, {"question": "q", "choices": ["a"]}) == []
    assert problems(schema, {"question": 1, "choices": "a"}) == [
        "choices: 'a' is not of type 'array'",
        "question: 1 is not of type 'string'",
    ]
    choice = Choice.model_json_schema()
    assert problems(choice, {"choice": True}) == [
        "choice: True is not one of ['red', 'blue']",
        "choice: True is not of type 'string'",
    ]
    assert problems(choice, {"choice": "x"}) == ["choice: 'x' is not one of ['red', 'blue']"]
    assert problems(choice, {"choice": "red", "note": 3}) == ["note: 3 is not of type 'string'"]
    assert problems(choice, {}) == ["(answer): 'choice' is a required property"]
