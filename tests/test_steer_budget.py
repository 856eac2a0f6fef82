"""A budget counts everything a call sends: steers, corrections, and the re-ask after a cut call.

Real dev server, real workers; the scripted model counts a token per four characters it reads
(the Messages API test server, with `count_tokens`, as the API bills), so a cap crossed shows
in the run's totals. Each test sends what an operator may send, then holds the run to its cap.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from pydantic import BaseModel
from temporalio.client import Client

from tests.agents import Payments, build_agent
from tests.conftest import Claude, running_worker, wait_for_state
from tests.fake_messages_api import FakeMessagesAPI
from tests.fake_messages_api import text as api_text
from tests.fake_messages_api import tool_use as api_tool_use
from tests.steer_app import texts
from waypoint._agent import Agent
from waypoint._providers.scripted import ScriptedModel
from waypoint._tools import tool
from waypoint.client import runs
from waypoint.protocol import (
    Correction,
    Limits,
    ModelRequest,
    ResumeRequest,
    RunStatus,
    StepOptions,
)
from waypoint.testing import reply, text, tool_use

CAP = 20_000
LIMITS = Limits(max_total_tokens=CAP, max_tokens_per_call=500)
STEERS = [f"Steer {i}: " + "mind the invoice and its totals. " * 580 for i in range(6)]
"""Six steers of ~19,000 characters: ~28,500 tokens together, more than the whole cap."""


class Hold(BaseModel):
    what: str


async def settled(client: Client, run: str, *states: str, timeout: float = 60) -> RunStatus:
    """The run's status once it is in one of `states` (a finished run answers from its memo)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        status = await runs.status(client, run)
        if status.state in states:
            return status
        assert asyncio.get_running_loop().time() < deadline, f"{run} stayed {status.state}"
        await asyncio.sleep(0.05)


def steers_read(requests: list[ModelRequest]) -> list[int]:
    """How many of the steers each request carried."""
    return [sum(any(s in t for t in texts(r)) for s in STEERS) for r in requests]


async def test_steers_sent_while_a_tool_runs_are_inside_the_next_steps_reservation(
    client: Client, task_queue: str
) -> None:
    started, release = asyncio.Event(), asyncio.Event()

    @tool("read")
    async def hold(args: Hold) -> str:
        """Wait until the test lets go."""
        started.set()
        await release.wait()
        return f"held {args.what}"

    agent = Agent(
        name="holder",
        model="claude-sonnet-4-6",
        system="You hold things.",
        tools=[hold],
        limits=LIMITS,
        script=[reply(tool_use("hold", what="the line")), reply(text("Done."))],
    )
    async with running_worker(client, [agent], task_queue) as model:
        handle = await runs.start_run(client, "holder", "hold it", task_queue=task_queue)
        await asyncio.wait_for(started.wait(), 30)
        for message in STEERS:
            sent = await runs.steer(client, handle.id, message, reviewer="grace")
            assert sent.recorded and sent.refused == ""
        release.set()
        parked = await settled(client, handle.id, "limit_reached", "done")
        # Before: t2.model was reserved without the steers, sent with them, and read 28,587.
        assert parked.state == "limit_reached", parked
        assert parked.detail.startswith(f"max_total_tokens={CAP} would be crossed: t2.model")
        assert "6 steers" in parked.detail
        assert model.calls == ["t1.model"] and parked.total_tokens <= CAP
        await handle.signal("raise_limits", LIMITS.model_copy(update={"max_total_tokens": 200_000}))
        result = await handle.result()
    assert result.state == "done" and result.output == "Done."
    assert model.calls == ["t1.model", "t2.model"]
    assert steers_read(model.requests) == [0, 6]  # every steer read, once
    assert CAP < result.total_tokens <= 200_000


async def test_the_re_ask_after_a_steer_cuts_a_call_reserves_the_steers_it_sends(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    script = [reply(text("Nothing to pay."))]
    agent = build_agent(Payments(tmp_path / "p.db"), script, limits=LIMITS)
    model = ScriptedModel(
        {agent.name: script}, latency_of=lambda r: 120.0 if r.step_id == "t1.model" else 0.0
    )
    async with running_worker(client, [agent], task_queue, scripted=model):
        handle = await runs.start_run(client, "payer", "pay nobody", task_queue=task_queue)
        deadline = asyncio.get_running_loop().time() + 30
        while model.calls != ["t1.model"]:
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.05)
        # The first cuts t1.model; the rest come while it stops and reports what it spent.
        await asyncio.gather(*(runs.steer(client, handle.id, m, reviewer="grace") for m in STEERS))
        parked = await settled(client, handle.id, "limit_reached", "done")
        ledger = await runs.ledger(client, handle.id)
        if parked.state != "done":
            await handle.terminate(reason="test over")
    # Before: t1.model.s1 was reserved without the steers and read ~28,500 tokens.
    assert parked.state == "limit_reached", parked
    assert parked.detail.startswith(f"max_total_tokens={CAP} would be crossed: t1.model.s")
    assert parked.total_tokens <= CAP
    assert model.calls[0] == "t1.model" and all(".s" in c for c in model.calls[1:])
    assert all(r.status == "cancelled" for r in ledger if r.kind == "model")
    assert steers_read(model.requests) == [0] * len(model.calls)  # none was sent past the cap


async def test_a_correction_sent_during_a_model_step_is_inside_the_next_reservation(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    cap = 6_000
    script = [
        reply(tool_use("weather", city="Oslo")),
        reply(tool_use("weather", city="Bergen")),
        reply(text("Sunny both.")),
    ]
    limits = Limits(max_total_tokens=cap, max_tokens_per_call=500)
    agent = build_agent(Payments(tmp_path / "p.db"), script, limits=limits)
    model = ScriptedModel(
        {agent.name: script}, latency_of=lambda r: 6.0 if r.step_id == "t2.model" else 0.0
    )
    big = "Oslo: sunny, and here is the whole forecast. " * 700  # ~31,000 characters
    async with running_worker(client, [agent], task_queue, scripted=model):
        handle = await runs.start_run(client, "payer", "weather", task_queue=task_queue)
        deadline = asyncio.get_running_loop().time() + 30
        while model.calls != ["t1.model", "t2.model"]:
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.05)
        fix = Correction(step_id="t1.tool.1.weather", result=big, reviewer="grace")
        await runs.correct(client, handle.id, fix)
        parked = await settled(client, handle.id, "limit_reached", "done")
        if parked.state != "done":
            await handle.terminate(reason="test over")
    # Before: t3.model was estimated from t2's count plus what came after, missing the
    # corrected result t2 never read; it read ~7,800 tokens.
    assert parked.state == "limit_reached", parked
    assert parked.detail.startswith(f"max_total_tokens={cap} would be crossed: t3.model")
    assert parked.total_tokens <= cap and model.calls == ["t1.model", "t2.model"]


@pytest.fixture
def api() -> Iterator[FakeMessagesAPI]:
    with FakeMessagesAPI(count_tokens=True) as api:
        yield api


async def test_a_correction_while_a_step_is_parked_by_an_outage_is_reserved_on_resume(
    client: Client, task_queue: str, tmp_path: Path, api: FakeMessagesAPI, claude: Claude
) -> None:
    cap = 8_000
    agent = build_agent(
        Payments(tmp_path / "p.db"),
        [],
        limits=Limits(max_total_tokens=cap, max_tokens_per_call=500),
    )
    api.enqueue_message(api_tool_use("weather", {"city": "Oslo"}))
    api.enqueue_error(529)
    api.enqueue_error(529)
    api.enqueue_message(api_text("Sunny."))
    options = StepOptions(
        model_max_attempts=2,
        retry_initial_interval=timedelta(milliseconds=50),
        retry_max_interval=timedelta(milliseconds=100),
    )
    big = "Oslo: sunny, and here is the whole forecast. " * 900  # ~40,000 characters
    async with running_worker(client, [agent], task_queue, claude=claude(api)):
        handle = await runs.start_run(
            client, "payer", "weather", task_queue=task_queue, options=options
        )
        await wait_for_state(client, handle.id, "model_unavailable")
        fix = Correction(step_id="t1.tool.1.weather", result=big, reviewer="grace")
        await runs.correct(client, handle.id, fix)
        await handle.signal("resume", ResumeRequest(reviewer="ops"))
        parked = await settled(client, handle.id, "limit_reached", "done")
        if parked.state != "done":
            await handle.terminate(reason="test over")
    # Before: the resumed t2.model was sent as reserved before the correction, ~10,000 tokens.
    assert parked.state == "limit_reached", parked
    assert parked.detail.startswith(f"max_total_tokens={cap} would be crossed: t2.model")
    assert parked.total_tokens <= cap
    assert len(api.message_requests) == 3  # t1.model, t2.model's two tries; none after
