"""Steering: a person's message reaches a running agent at the next safe point, once.

Real dev server, real workers (in process, and subprocesses SIGKILLed), a real SQLite
downstream; the scripted model is slowed down so a step is in flight when the steer comes.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest
from pydantic import BaseModel
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowFailureError
from temporalio.exceptions import CancelledError
from temporalio.testing import WorkflowEnvironment

from tests.agents import PAY_SCRIPT, Payments, build_agent
from tests.cli import waypoint
from tests.conftest import Claude, running_worker, wait_for_state
from tests.fake_messages_api import FakeMessagesAPI
from tests.fake_messages_api import text as api_text
from tests.steer_app import SAY_DONE, TO_BOB, texts
from tests.test_typed_output import Receipt, typed_agent
from waypoint._agent import Agent
from waypoint._providers.scripted import ScriptedModel
from waypoint._tools import ToolContext, tool
from waypoint.client import runs
from waypoint.errors import DecisionRefusedError, RunClosedError
from waypoint.protocol import (
    ModelRequest,
    ModelResponse,
    ResumeRequest,
    Steer,
    StepOptions,
    StepRecord,
)
from waypoint.protocol.events import Steered, StepFailed
from waypoint.testing import WorkerProcess, final_answer, reply, text, tool_use

ROOT = Path(__file__).parent.parent


def slow(*steps: str, seconds: float = 120.0) -> Callable[[ModelRequest], float]:
    """Latency for the scripted model: the named steps take long enough to be steered."""
    return lambda request: seconds if request.step_id in steps else 0.0


def read(request: ModelRequest) -> str:
    return "\n".join(texts(request))


def line(ledger: list[StepRecord], step_id: str) -> StepRecord:
    return next(r for r in ledger if r.step_id == step_id)


async def until(check: Callable[[], bool], timeout: float = 30) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("timed out")
        await asyncio.sleep(0.05)


def cli_env(env: WorkflowEnvironment) -> dict[str, str]:
    """What `waypoint` needs to reach the test server, from this worktree."""
    return {
        **os.environ,
        "TEMPORAL_ADDRESS": env.client.service_client.config.target_host,
        "PYTHONPATH": str(ROOT),
    }


def paying(payments: Payments) -> Agent:
    """Pays whoever the steer names: ada unless told bob."""
    script = [
        lambda r: reply(tool_use("pay", payee="bob" if TO_BOB in read(r) else "ada", amount=5)),
        reply(text("Paid.")),
    ]
    return build_agent(payments, script)


async def test_steer_cancels_the_model_step_in_flight_and_asks_again_with_the_message(
    client: Client, env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    payments = Payments(tmp_path / "payments.db")
    agent = paying(payments)
    model = ScriptedModel({agent.name: agent.script or []}, latency_of=slow("t1.model"))
    async with running_worker(client, [agent], task_queue, scripted=model):
        handle = await runs.start_run(client, "payer", "pay ada 5", task_queue=task_queue)
        await until(lambda: model.calls == ["t1.model"])
        sent = await runs.steer(client, handle.id, TO_BOB, reviewer="grace")
        result = await handle.result()
        events = [e async for e in runs.events(client, handle.id, live=False)]
        watched = await asyncio.to_thread(waypoint, cli_env(env), "watch", handle.id)
    receipt = sent
    assert receipt is not None and receipt.step_id == "t1.operator.1"
    assert receipt.detail == "t1.model was in flight: cancelled, and asked again with it"
    assert receipt.decided_by == f"grace ({client.identity})"
    assert model.calls == ["t1.model", "t1.model.s1", "t2.model"]
    first, again = model.requests[0], model.requests[1]
    assert TO_BOB not in read(first)
    assert read(again).count(TO_BOB) == 1  # appended to the prompt the cancelled call had
    assert again.messages[-1].role == "user" and len(again.messages) == len(first.messages)
    assert payments.count() == 1 and "bob" in result.ledger[-2].summary

    cancelled = line(result.ledger, "t1.model")
    assert cancelled.status == "cancelled"
    assert cancelled.tokens > 0 and cancelled.cost_usd == 0.0  # the scripted model is free
    spent = f"cancelled by steer t1.operator.1: {cancelled.tokens:,} tokens, $0.0000"
    assert cancelled.summary == spent
    steer = line(result.ledger, "t1.operator.1")
    assert (steer.kind, steer.tool, steer.status) == ("operator", "steer", "completed")
    assert steer.decided_by == receipt.decided_by and steer.decided_at == receipt.decided_at
    assert steer.summary == f"steer, cancels t1.model: {TO_BOB}"
    assert [r.step_id for r in result.ledger] == [
        "t0.spec",
        "t1.model",
        "t1.operator.1",
        "t1.model.s1",
        "t1.tool.1.pay",
        "t2.model",
    ]
    assert result.total_tokens == sum(r.tokens for r in result.ledger)  # nothing hidden
    assert result.cost_known
    (shown,) = [e for e in events if isinstance(e, Steered)]
    assert (shown.step_id, shown.decided_by) == ("t1.operator.1", receipt.decided_by)
    assert shown.decided_at == receipt.decided_at and TO_BOB in shown.summary
    assert any(isinstance(e, StepFailed) and e.status == "cancelled" for e in events)
    assert watched.returncode == 0, watched.stderr
    shown = " ".join(watched.stdout.split())
    assert f"steered t1.operator.1 by {receipt.decided_by} at {receipt.decided_at}" in shown
    assert f"cancelled t1.model {spent}" in shown


async def test_steer_cuts_a_claude_reply_mid_stream_and_records_what_it_reported(
    client: Client, task_queue: str, tmp_path: Path, claude: Claude
) -> None:
    agent = build_agent(Payments(tmp_path / "payments.db"), script=[])
    with FakeMessagesAPI() as api:
        usage = {"input_tokens": 120, "output_tokens": 40}
        api.enqueue_message(api_text("I will pay ada now."), event_delay=3.0, usage=usage)
        api.enqueue_message(api_text("Paying bob instead."), usage=usage)
        claude_model = claude(api)
        async with running_worker(client, [agent], task_queue, claude=claude_model):
            handle = await runs.start_run(client, "payer", "pay ada 5", task_queue=task_queue)
            await until(lambda: len(api.message_requests) == 1)
            await runs.steer(client, handle.id, TO_BOB, reviewer="grace")
            result = await handle.result()
        asked_again = api.message_requests[1].body
    assert result.output == "Paying bob instead." and len(api.message_requests) == 2
    assert json.dumps(asked_again["messages"]).count(TO_BOB) == 1
    cut = line(result.ledger, "t1.model")
    # Claude said the input at the start of its reply; the output only comes at the end.
    assert (cut.status, cut.tokens, cut.cost_usd) == ("cancelled", 121, None)
    assert cut.summary.endswith("121 tokens reported, the rest unknown; cost unknown")
    answered = line(result.ledger, "t1.model.s1")
    assert answered.tokens == 160 and answered.cost_usd is not None
    assert result.total_tokens == 121 + 160 and not result.cost_known
    assert result.cost_usd == answered.cost_usd


async def test_a_run_parked_by_an_outage_is_asked_again_with_the_steer_on_resume(
    client: Client, task_queue: str, tmp_path: Path, claude: Claude
) -> None:
    agent = build_agent(Payments(tmp_path / "payments.db"), script=[])
    two_tries = StepOptions(model_max_attempts=2, retry_initial_interval=timedelta(seconds=0.05))
    with FakeMessagesAPI() as api:
        api.enqueue_error(529)
        api.enqueue_error(529)
        api.enqueue_message(api_text("Paying bob."))
        async with running_worker(client, [agent], task_queue, claude=claude(api)):
            handle = await runs.start_run(
                client, "payer", "pay ada 5", task_queue=task_queue, options=two_tries
            )
            await wait_for_state(client, handle.id, "model_unavailable")
            sent = await runs.steer(client, handle.id, TO_BOB, reviewer="grace")
            await handle.signal("resume", ResumeRequest(reviewer="grace"))
            result = await handle.result()
        bodies = [json.dumps(r.body["messages"]) for r in api.message_requests]
    assert sent.recorded
    parked = "the run is parked (model_unavailable): goes to the model when it goes on"
    assert sent.detail == parked
    assert [b.count(TO_BOB) for b in bodies] == [0, 0, 1]
    assert [(r.step_id, r.status) for r in result.ledger if r.kind == "model"] == [
        ("t1.model", "error"),
        ("t1.model.s1", "completed"),
    ]


ANSWERED_FIRST = f"steer, t1.model answered first: {TO_BOB}"


@pytest.mark.parametrize("typed", [False, True], ids=["text answer", "typed answer"])
async def test_a_steer_as_the_model_ends_its_turn_is_read_or_marked_never_dropped(
    client: Client, task_queue: str, tmp_path: Path, typed: bool
) -> None:
    def answer(request: ModelRequest) -> ModelResponse:
        said = "bob" if TO_BOB in read(request) else "ada"
        return reply(final_answer(Receipt(payee=said, amount=5)) if typed else text(said))

    agent = typed_agent(tmp_path, [answer, answer]) if typed else paying(Payments(tmp_path / "p"))
    agent = dataclasses.replace(agent, script=[answer, answer])
    model = ScriptedModel({agent.name: [answer, answer]}, latency_of=slow("t1.model", seconds=6))
    # Heartbeats every 30 s: the cancel cannot reach the call before it answers, so the steer
    # meets a finished turn (were it to reach it, the step is cut and asked again instead).
    quiet = timedelta(seconds=30)
    async with running_worker(
        client, [agent], task_queue, scripted=model, max_heartbeat_throttle_interval=quiet
    ):
        handle = await runs.start_run(client, agent.name, "pay ada 5", task_queue=task_queue)
        await until(lambda: model.calls == ["t1.model"])
        await asyncio.sleep(2)  # past the call's first heartbeat
        await runs.steer(client, handle.id, TO_BOB, reviewer="grace")
        result = await handle.result()
    steer = line(result.ledger, "t1.operator.1")
    if line(result.ledger, "t1.model").status == "cancelled":  # the cancel won the race
        assert model.calls == ["t1.model", "t1.model.s1"] and steer.status == "completed"
    elif typed:  # the typed answer ends the run: the steer says it was never read
        assert model.calls == ["t1.model"] and result.output_json == {
            "payee": "ada",
            "amount": 5,
            "note": "",
        }
        assert steer.status == "error"
        assert steer.summary == f"not delivered: the run ended first. {ANSWERED_FIRST}"
    else:  # a text answer does not end the run: the model reads the message next
        assert model.calls == ["t1.model", "t2.model"] and result.output == "bob"
        assert (steer.status, steer.summary) == ("completed", ANSWERED_FIRST)
    assert sum(read(r).count(TO_BOB) for r in model.requests) == len(model.calls) - 1


class SlowPayArgs(BaseModel):
    payee: str


async def test_steer_while_an_effect_runs_waits_for_it_and_goes_with_its_result(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    payments = Payments(tmp_path / "payments.db")
    hold, started = tmp_path / "hold", tmp_path / "started"

    @tool("effect", idempotent=True)
    async def slow_pay(args: SlowPayArgs, ctx: ToolContext) -> dict:
        """Pay, slowly: holds while the hold file exists."""
        started.touch()
        while hold.exists():
            await asyncio.sleep(0.05)
        assert ctx.effect_key
        return payments.pay(ctx.effect_key, args.payee, 1)

    agent = Agent(
        name="slow_payer",
        model="claude-sonnet-4-6",
        system="You pay people.",
        tools=[slow_pay],
        script=[reply(tool_use("slow_pay", payee="ada")), reply(text("Paid."))],
    )
    hold.touch()
    async with running_worker(client, [agent], task_queue) as model:
        handle = await runs.start_run(client, "slow_payer", "pay ada", task_queue=task_queue)
        await until(started.exists)
        sent = await runs.steer(client, handle.id, "Tell me the effect key.", reviewer="lin")
        hold.unlink()
        result = await handle.result()
    assert sent.recorded
    assert sent.detail == "goes to the model with the results of t1.tool.1.slow_pay"
    assert payments.count() == 1  # the effect ran once, not cut short
    pay = line(result.ledger, "t1.tool.1.slow_pay")
    assert pay.status == "completed" and payments.count(pay.effect_key) == 1
    assert model.calls == ["t1.model", "t2.model"]  # no model step was in flight to cancel
    results = model.requests[1].messages[-1]
    kinds = [type(b).__name__ for b in results.content]
    assert kinds == ["ToolResultBlock", "TextBlock"]  # the message goes after the results
    assert read(model.requests[1]).count("Tell me the effect key.") == 1
    steer = line(result.ledger, "t1.operator.1")
    assert steer.summary.startswith("steer, after t1.tool.1.slow_pay: ")


async def test_steer_with_no_worker_up_is_applied_when_a_worker_starts(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    payments = Payments(tmp_path / "payments.db")
    agent = build_agent(payments, PAY_SCRIPT, approval=True)
    model = ScriptedModel({agent.name: PAY_SCRIPT})
    async with running_worker(client, [agent], task_queue, scripted=model):
        handle = await runs.start_run(client, "payer", "pay ada 5", task_queue=task_queue)
        await wait_for_state(client, handle.id, "awaiting_approval")
    sent = await runs.steer(client, handle.id, "Also mention the date.", reviewer="lin", timeout=2)
    assert not sent.recorded and sent.as_of  # checked against the memo, sent as a signal
    async with running_worker(client, [agent], task_queue, scripted=model):
        await runs.approve(client, handle.id, "t2.tool.1.pay", reviewer="lin")
        result = await handle.result()
    steer = line(result.ledger, "t2.operator.1")
    assert steer.tool == "steer" and steer.decided_by == f"lin ({client.identity})"
    assert steer.summary == "steer, after t2.tool.1.pay: Also mention the date."
    asked = {r.step_id: r for r in model.requests}
    assert "Also mention the date." not in read(asked["t2.model"])
    assert read(asked["t3.model"]).count("Also mention the date.") == 1
    assert payments.count() == 1


async def test_a_steer_the_run_cannot_take_is_refused_and_never_fails_it(
    client: Client, task_queue: str, tmp_path: Path, env: WorkflowEnvironment
) -> None:
    agent = build_agent(Payments(tmp_path / "payments.db"), PAY_SCRIPT, approval=True)
    async with running_worker(client, [agent], task_queue):
        handle = await runs.start_run(client, "payer", "pay ada 5", task_queue=task_queue)
        await wait_for_state(client, handle.id, "awaiting_approval")
        with pytest.raises(DecisionRefusedError, match="an empty message"):
            await runs.steer(client, handle.id, "  \n ", reviewer="lin")
        await handle.signal("steer", Steer(message=""))
        await handle.signal("steer", {"note": 42})  # not a steer at all
        sent = await runs.steer(client, handle.id, "Pay 4.", reviewer="lin", decision_id="d-1")
        await handle.signal("steer", Steer(message="Pay 4.", reviewer="lin", decision_id="d-1"))
        await runs.approve(client, handle.id, "t2.tool.1.pay", reviewer="lin")
        result = await handle.result()
        ignored = [i.reason for i in (await runs.status(client, handle.id)).ignored_signals]
    assert sent.recorded and sent.step_id == "t2.operator.1"
    assert [r.step_id for r in result.ledger if r.tool == "steer"] == ["t2.operator.1"]
    assert ignored[0] == "an empty message: say what the agent should know or do"
    assert ignored[1].startswith("malformed steer payload (message: missing")
    assert ignored[2].startswith("duplicate: decision d-1 was already applied (t2.operator.1)")
    assert result.state == "done"

    with pytest.raises(RunClosedError, match="nothing to steer"):
        await runs.steer(client, handle.id, "Too late.", reviewer="lin")
    said = await asyncio.to_thread(waypoint, cli_env(env), "steer", handle.id, "Too late.")
    assert said.returncode == 1
    assert said.stderr.strip() == f"error: run {handle.id!r} is completed: nothing to steer"


async def test_a_run_cancelled_during_a_model_step_ends_cancelled(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    agent = build_agent(Payments(tmp_path / "payments.db"), PAY_SCRIPT)
    model = ScriptedModel({agent.name: PAY_SCRIPT}, latency_of=slow("t1.model"))
    async with running_worker(client, [agent], task_queue, scripted=model):
        handle = await runs.start_run(client, "payer", "pay ada 5", task_queue=task_queue)
        await until(lambda: model.calls == ["t1.model"])
        await handle.cancel()
        with pytest.raises(WorkflowFailureError) as failed:
            await asyncio.wait_for(handle.result(), 30)
    assert isinstance(failed.value.cause, CancelledError)


KILL_OPTIONS = StepOptions(
    model_timeout=timedelta(seconds=60),
    model_heartbeat_timeout=timedelta(seconds=8),
    retry_initial_interval=timedelta(milliseconds=100),
    retry_max_interval=timedelta(milliseconds=500),
)
"""Slow model steps (4 s each) a killed worker leaves for 8 s, long enough to steer meanwhile."""


async def scheduled(client: Client, run: str, step_id: str) -> bool:
    """Whether the run's history has scheduled the step's activity."""
    async for event in runs.handle(client, run).fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attrs = event.activity_task_scheduled_event_attributes
            if attrs.activity_id.split("#")[0] == step_id:
                return True
    return False


@pytest.mark.slow
async def test_kill_between_the_steer_and_the_step_asked_again_delivers_the_message_once(
    client: Client, env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    requests = tmp_path / "requests.jsonl"
    payments = Payments(tmp_path / "payments.db")
    worker = WorkerProcess(
        "tests.steer_app:agents",
        {
            **os.environ,
            "TEMPORAL_ADDRESS": env.client.service_client.config.target_host,
            "WAYPOINT_TASK_QUEUE": task_queue,
            "WAYPOINT_TEST_PAYMENTS": str(payments.path),
            "STEER_REQUESTS": str(requests),
            "WAYPOINT_SCRIPTED_LATENCY": "4",
            "WAYPOINT_ATTEMPT_JOURNAL": str(tmp_path / "attempts-1"),
            "PYTHONPATH": str(ROOT),
        },
        tmp_path / "worker.log",
    )

    def asked() -> list[tuple[str, str]]:
        lines = requests.read_text().splitlines() if requests.exists() else []
        return [(r["step_id"], "\n".join(r["texts"])) for r in map(json.loads, lines)]

    try:
        worker.start()
        handle = await runs.start_run(
            client,
            "payer",
            "pay ada 5",
            task_queue=task_queue,
            options=KILL_OPTIONS,
            task_timeout=timedelta(seconds=2),
        )
        # The worker dies with t1.model in flight; the steer goes as a signal; the next
        # worker cancels a step nobody is left to report on.
        await until(lambda: [s for s, _ in asked()] == ["t1.model"])
        worker.kill()
        by_signal = await runs.steer(client, handle.id, TO_BOB, reviewer="grace", timeout=2)
        # Not the dead worker's journal: it would free t1.model at once, and the retry would
        # race the steer's cancel (it won once the server fired a retry due now at once).
        worker.env["WAYPOINT_ATTEMPT_JOURNAL"] = str(tmp_path / "attempts-2")
        worker.start()
        # t2.model is steered by Update; the worker dies once the step asked again with the
        # message is scheduled, before it answers.
        await until(lambda: "t2.model" in [s for s, _ in asked()], timeout=90)
        by_update = await runs.steer(client, handle.id, SAY_DONE, reviewer="grace")
        for _ in range(600):
            if await scheduled(client, handle.id, "t2.model.s1"):
                break
            await asyncio.sleep(0.05)
        worker.kill()
        worker.start()
        result = await asyncio.wait_for(handle.result(), 120)
        assert worker.stop() == 0
    finally:
        worker.kill()

    assert not by_signal.recorded
    assert by_update.recorded and by_update.step_id == "t2.operator.2"
    assert result.output == "bob is paid."
    paid = payments.find(line(result.ledger, "t1.tool.1.pay").effect_key or "")
    assert payments.count() == 1 and paid is not None and paid["payee"] == "bob"
    seen = asked()
    steps = [s for s, _ in seen]
    assert steps.count("t1.model") == 1 and steps.count("t1.model.s1") == 1
    assert "t2.model.s1" in steps
    for step, said in seen:  # each message read once by every step from its delivery on
        assert said.count(TO_BOB) == (0 if step == "t1.model" else 1), (step, said)
        assert said.count(SAY_DONE) == (1 if step == "t2.model.s1" else 0), (step, said)

    unknown = line(result.ledger, "t1.model")  # its worker died: nobody could say
    assert (unknown.status, unknown.cost_usd) == ("cancelled", None)
    assert "tokens unknown" in unknown.summary and not result.cost_known
    reported = line(result.ledger, "t2.model")
    assert reported.status == "cancelled" and reported.tokens > 0 and reported.cost_usd == 0.0
    steers = [r for r in result.ledger if r.tool == "steer"]
    assert [r.step_id for r in steers] == ["t1.operator.1", "t2.operator.2"]
    assert all(r.decided_by and r.decided_by.startswith("grace (") for r in steers)
