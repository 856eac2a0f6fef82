"""No steer's receipt promises what will not happen: after a cancel, as a run ends, at its limit.

Real dev server, real workers; the scripted model is slowed down, and its heartbeats spaced out,
so a cancel is still on its way to the call when the steer comes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest
from pydantic import BaseModel
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.exceptions import CancelledError

from tests.agents import Payments, build_agent
from tests.conftest import running_worker, wait_until
from tests.steer_app import TO_BOB, texts
from waypoint._agent import Agent
from waypoint._providers.scripted import ScriptedModel
from waypoint._tools import tool
from waypoint.client import runs
from waypoint.errors import DecisionRefusedError
from waypoint.protocol import Limits, ModelRequest, ModelResponse, Steer, StepRecord
from waypoint.testing import reply, text, tool_use

QUIET = timedelta(seconds=8)
"""Heartbeats this far apart: a cancel reaches a model call seconds after it was asked."""


class Hold(BaseModel):
    what: str


def read(request: ModelRequest) -> str:
    return "\n".join(texts(request))


def steers(ledger: list[StepRecord]) -> list[StepRecord]:
    return [r for r in ledger if r.tool == "steer"]


async def until(check: Callable[[], bool], timeout: float = 30) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.05)


async def cancel_sent_to_the_call(handle: WorkflowHandle) -> bool:
    """The run has taken its cancel: it asked the model call in flight to stop."""
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_CANCEL_REQUESTED:
            return True
    return False


async def ended_cancelled(handle: WorkflowHandle) -> None:
    with pytest.raises(WorkflowFailureError) as failed:
        await asyncio.wait_for(handle.result(), 30)
    assert isinstance(failed.value.cause, CancelledError)


async def test_a_steer_after_a_cancel_is_refused_not_promised_a_re_ask(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    script = [reply(text("Nothing to pay."))]
    agent = build_agent(Payments(tmp_path / "p.db"), script)
    model = ScriptedModel({agent.name: script}, latency_of=lambda r: 120.0)
    async with running_worker(
        client, [agent], task_queue, scripted=model, max_heartbeat_throttle_interval=QUIET
    ):
        handle = await runs.start_run(client, "payer", "pay nobody", task_queue=task_queue)
        await until(lambda: model.calls == ["t1.model"])
        await asyncio.sleep(1)  # past the call's first heartbeat: the next is seconds away
        await handle.cancel()
        await wait_until(lambda: cancel_sent_to_the_call(handle), "the cancel reached the run")
        # Before: accepted, "t1.model was in flight: cancelled, and asked again with it".
        with pytest.raises(DecisionRefusedError, match="the run is being cancelled"):
            await runs.steer(client, handle.id, TO_BOB, reviewer="grace")
        await handle.signal("steer", Steer(message=TO_BOB, reviewer="grace"))
        ignored = [i.reason for i in (await runs.status(client, handle.id)).ignored_signals]
        await ended_cancelled(handle)
        ledger = await handle.query("ledger", result_type=list[StepRecord])
    assert any(r.startswith("the run is being cancelled") for r in ignored), ignored
    assert steers(ledger) == [] and model.calls == ["t1.model"]


@pytest.mark.parametrize("during", ["tool", "model step"])
async def test_a_steer_taken_before_a_cancel_is_marked_undelivered_when_the_run_ends(
    client: Client, task_queue: str, during: str
) -> None:
    started = asyncio.Event()

    @tool("read")
    async def hold(args: Hold) -> str:
        """Wait until the run is cancelled."""
        started.set()
        await asyncio.sleep(120)
        return f"held {args.what}"

    script = [reply(tool_use("hold", what="the line")), reply(text("Done."))]
    agent = Agent(
        name="holder", model="claude-sonnet-4-6", system="You hold.", tools=[hold], script=script
    )
    slow = 120.0 if during == "model step" else 0.0
    model = ScriptedModel({agent.name: script}, latency_of=lambda r: slow)
    async with running_worker(
        client, [agent], task_queue, scripted=model, max_heartbeat_throttle_interval=QUIET
    ):
        handle = await runs.start_run(client, "holder", "hold it", task_queue=task_queue)
        if during == "tool":
            await asyncio.wait_for(started.wait(), 30)
        else:
            await until(lambda: model.calls == ["t1.model"])
            await asyncio.sleep(1)  # the steer's cancel waits for the next heartbeat
        sent = await runs.steer(client, handle.id, TO_BOB, reviewer="grace")
        await handle.cancel()
        await ended_cancelled(handle)
        ledger = await handle.query("ledger", result_type=list[StepRecord])
    assert sent.recorded and sent.refused == ""
    (steer,) = steers(ledger)
    # Before: "completed", as if the model had read it, and no re-ask ever came.
    assert steer.status == "error"
    assert steer.summary.startswith("not delivered: the run was cancelled first. steer, ")
    assert all(TO_BOB not in read(r) for r in model.requests) and model.calls == ["t1.model"]


async def test_a_steer_at_the_last_allowed_turn_ends_the_run_and_says_it_was_not_read(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    def answer(request: ModelRequest) -> ModelResponse:
        return reply(text("bob" if TO_BOB in read(request) else "ada"))

    agent = build_agent(Payments(tmp_path / "p.db"), [answer], limits=Limits(max_turns=1))
    model = ScriptedModel(
        {agent.name: [answer]}, latency_of=lambda r: 6.0 if r.step_id == "t1.model" else 0.0
    )
    # Heartbeats 30 s apart: the steer's cancel cannot reach t1.model before it answers, so
    # the steer meets a turn that ended, and no turn is left to read it.
    quiet = timedelta(seconds=30)
    async with running_worker(
        client, [agent], task_queue, scripted=model, max_heartbeat_throttle_interval=quiet
    ):
        handle = await runs.start_run(client, "payer", "pay ada 5", task_queue=task_queue)
        await until(lambda: model.calls == ["t1.model"])
        await asyncio.sleep(2)  # past the call's first heartbeat
        sent = await runs.steer(client, handle.id, TO_BOB, reviewer="grace")
        # Before: the run parked in limit_reached (max_turns=1 reached) with its answer held.
        result = await asyncio.wait_for(handle.result(), 30)
    assert sent.recorded and sent.detail == (
        "t1.model was in flight: cancelled, and asked again with it "
        "(should it answer first, max_turns=1 leaves no turn to read it)"
    )
    (steer,) = steers(result.ledger)
    if model.calls == ["t1.model", "t1.model.s1"]:  # the cancel won the race: read in turn 1
        assert result.output == "bob" and steer.status == "completed"
        return
    assert model.calls == ["t1.model"]
    assert (result.state, result.output) == ("done", "ada")
    assert steer.status == "error"
    assert steer.summary == (
        "not delivered: max_turns=1 leaves no turn to read it. "
        f"steer, t1.model answered first: {TO_BOB}"
    )
