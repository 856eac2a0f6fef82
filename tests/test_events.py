"""A run streams typed events live: steps, approvals, states, its end, and Claude's words."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import get_args

from temporalio import activity
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHistory
from temporalio.testing import WorkflowEnvironment

from tests.agents import Payments, build_agent, long_script
from tests.conftest import payer_run, running_worker, start_continuing, wait_for_state
from waypoint._providers.scripted import ScriptedModel
from waypoint._workflows.live import LiveStreamWorkflow
from waypoint.client import runs
from waypoint.client.runs import start_run
from waypoint.protocol import Limits, ModelRequest, ModelResponse
from waypoint.protocol.base import RunState
from waypoint.protocol.events import (
    ApprovalDecided,
    ApprovalRequested,
    RunEnded,
    RunEvent,
    StateChanged,
    StepCompleted,
    StepScheduled,
    TextDelta,
    delta_stream_id,
    run_event,
)
from waypoint.protocol.states import PARKED_STATES
from waypoint.testing import reply, text

LONG_ANSWER = "The payment to ada went through, and here is a long account of it. " * 4


async def _collect(client: Client, run: str, from_offset: int = 0) -> list[RunEvent]:
    return [e async for e in runs.events(client, run, from_offset)]


def _lifecycle(events: list[RunEvent]) -> list[RunEvent]:
    return [e for e in events if e.offset is not None]


async def test_a_run_with_an_approval_streams_typed_lifecycle_events_in_order(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    async with payer_run(client, task_queue, Payments(tmp_path / "p.db")) as handle:
        reader = asyncio.create_task(_collect(client, handle.id))
        await wait_for_state(client, handle.id, "awaiting_approval")
        await runs.approve(client, handle.id, "t2.tool.1.pay", reviewer="grace")
        await handle.result()
        events = await asyncio.wait_for(reader, 20)
    lifecycle = _lifecycle(events)
    assert [e.offset for e in lifecycle] == list(range(len(lifecycle)))
    kinds = [(e.type, getattr(e, "step_id", getattr(e, "state", ""))) for e in lifecycle]
    expected = [
        ("step_scheduled", "t0.spec"),
        ("step_completed", "t0.spec"),
        ("state_changed", "running"),
        ("step_scheduled", "t1.model"),
        ("step_completed", "t1.model"),
        ("step_scheduled", "t1.tool.1.weather"),
        ("step_scheduled", "t1.tool.2.add"),
        ("step_scheduled", "t2.model"),
        ("step_completed", "t2.model"),
        ("step_scheduled", "t2.tool.1.pay"),
        ("approval_requested", "t2.tool.1.pay"),
        ("state_changed", "awaiting_approval"),
        ("approval_decided", "t2.tool.1.pay"),
        ("state_changed", "running"),
        ("step_completed", "t2.tool.1.pay"),
        ("step_scheduled", "t3.model"),
        ("step_completed", "t3.model"),
        ("state_changed", "done"),
        ("run_ended", "done"),
    ]
    tool_done = {("step_completed", "t1.tool.1.weather"), ("step_completed", "t1.tool.2.add")}
    assert tool_done <= set(kinds)
    assert [k for k in kinds if k not in tool_done] == expected, kinds
    decided = next(e for e in lifecycle if isinstance(e, ApprovalDecided))
    assert decided.approved and decided.decided_by.startswith("grace")
    requested = next(e for e in lifecycle if isinstance(e, ApprovalRequested))
    assert requested.arguments == {"payee": "ada", "amount": 5}
    t3 = next(e for e in lifecycle if isinstance(e, StepCompleted) and e.step_id == "t3.model")
    assert t3.text == "Paid ada 5." and t3.tokens > 0 and t3.cost_usd is not None
    ended = lifecycle[-1]
    assert isinstance(ended, RunEnded) and ended.output == "Paid ada 5."
    parked = [e for e in lifecycle if isinstance(e, StateChanged) and e.parked]
    assert [e.state for e in parked] == ["awaiting_approval"]


async def test_deltas_arrive_before_their_step_completes(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    said = [reply(text(LONG_ANSWER), text("No advisories."))]  # two blocks: two lines
    agent = build_agent(Payments(tmp_path / "p.db"), said)
    scripted = ScriptedModel({agent.name: agent.script or []}, latency=1.0, chunks=10)
    async with running_worker(client, [agent], task_queue, scripted=scripted):
        handle = await start_run(client, "payer", "tell me", task_queue=task_queue)
        seen: list[tuple[RunEvent, float]] = []
        async for event in runs.events(client, handle.id):
            seen.append((event, asyncio.get_running_loop().time()))
    deltas = [(e, t) for e, t in seen if isinstance(e, TextDelta) and e.text]
    done_at = next(t for e, t in seen if isinstance(e, StepCompleted) and e.step_id == "t1.model")
    assert "".join(e.text for e, _ in deltas) == f"{LONG_ANSWER}\nNo advisories."
    done = next(e for e, _ in seen if isinstance(e, StepCompleted) and e.step_id == "t1.model")
    assert isinstance(done, StepCompleted) and done.text == f"{LONG_ANSWER}\nNo advisories."
    assert len(deltas) >= 5
    # They were streamed while the step ran, not all at once at its end.
    assert deltas[0][1] < done_at - 0.5
    assert all(t <= done_at for _, t in deltas)


async def test_an_unwatched_run_streams_no_words_and_starts_no_stream_workflow(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """Claude's words cost nothing when nobody reads them: no lease, no per-step stream."""
    agent = build_agent(Payments(tmp_path / "p.db"), [reply(text(LONG_ANSWER))])
    async with running_worker(client, [agent], task_queue):
        handle = await start_run(client, "payer", "tell me", task_queue=task_queue)
        await handle.result()
        events = await _collect(client, handle.id)
    assert not [e for e in events if isinstance(e, TextDelta)]
    assert any(isinstance(e, StepCompleted) and e.step_id == "t1.model" for e in events)
    streams = client.list_workflows(f"WorkflowId STARTS_WITH '{handle.id}/live/'")
    assert [w.id async for w in streams] == []


async def test_a_late_reader_gets_everything_once_and_resumes_from_an_offset(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    async with payer_run(client, task_queue, Payments(tmp_path / "p.db")) as handle:
        await wait_for_state(client, handle.id, "awaiting_approval")
        early: list[RunEvent] = []
        async for event in runs.events(client, handle.id):
            early.append(event)
            if isinstance(event, StateChanged) and event.state == "awaiting_approval":
                break
        resumed = asyncio.create_task(_collect(client, handle.id, (early[-1].offset or 0) + 1))
        await runs.approve(client, handle.id, "t2.tool.1.pay", reviewer="grace")
        await handle.result()
        rest = await asyncio.wait_for(resumed, 20)
        late = await asyncio.wait_for(_collect(client, handle.id), 20)
    joined = _lifecycle(early) + _lifecycle(rest)
    assert [e.offset for e in joined] == list(range(len(joined)))
    assert [e.model_dump() for e in joined] == [e.model_dump() for e in _lifecycle(late)]
    assert isinstance(joined[-1], RunEnded)
    # The late reader gets the finished steps' words from the recorded past, not from deltas.
    assert not [e for e in late if isinstance(e, TextDelta)]
    assert any(isinstance(e, StepCompleted) and e.text == "Paid ada 5." for e in late)


async def test_watch_json_prints_one_parseable_event_per_line(
    client: Client, env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    cli_env = {
        **os.environ,
        "TEMPORAL_ADDRESS": env.client.service_client.config.target_host,
        "TEMPORAL_NAMESPACE": "default",
        "PYTHONPATH": str(Path(__file__).parent.parent),
    }
    agent = build_agent(Payments(tmp_path / "p.db"), [reply(text("Hello there."))])
    async with running_worker(client, [agent], task_queue):
        handle = await start_run(client, "payer", "hi", task_queue=task_queue)
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "waypoint",
            "watch",
            handle.id,
            "--json",
            env=cli_env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    lines = out.decode().splitlines()
    events = [run_event.validate_json(line) for line in lines]
    assert isinstance(events[0], StepScheduled)
    assert isinstance(events[-1], RunEnded)
    assert all("type" in json.loads(line) for line in lines)


def _bytes_per_turn(history: WorkflowHistory) -> dict[int, int]:
    """History bytes of each turn, from its model step's scheduling to the next one's."""
    per: dict[int, int] = {}
    turn = 0
    for event in history.events:
        attrs = event.activity_task_scheduled_event_attributes
        if event.HasField("activity_task_scheduled_event_attributes"):
            head = attrs.activity_id.split(".", 1)[0]
            if attrs.activity_id.split("#")[0].endswith(".model") and head[1:].isdigit():
                turn = int(head[1:])
        per[turn] = per.get(turn, 0) + event.ByteSize()
    return per


async def _run_turns(
    client: Client, task_queue: str, tmp_path: Path, turns: int, streaming: bool
) -> dict[int, int]:
    agent = build_agent(Payments(tmp_path / f"p{streaming}.db"), long_script(turns, pay_every=1000))
    agent.limits = Limits(max_turns=turns + 5)
    queue = f"{task_queue}-{streaming}"
    async with running_worker(client, [agent], queue, live_text=streaming):
        handle = await start_run(client, "payer", "long", task_queue=queue)
        reader = asyncio.create_task(_collect(client, handle.id)) if streaming else None
        result = await handle.result()
        if reader is not None:
            events = await asyncio.wait_for(reader, 30)
            assert isinstance(events[-1], RunEnded)
    assert result.turns == turns
    return _bytes_per_turn(await handle.fetch_history())


async def test_a_reader_attached_throughout_gets_every_turns_words(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """Each model step long enough to be watched streams to a reader that follows the run."""
    turns = 3
    agent = build_agent(Payments(tmp_path / "p.db"), long_script(turns, pay_every=1000))
    agent.limits = Limits(max_turns=turns + 5)
    scripted = ScriptedModel({agent.name: agent.script or []}, latency=1.2, chunks=4)
    async with running_worker(client, [agent], task_queue, scripted=scripted):
        handle = await start_run(client, "payer", "long", task_queue=task_queue)
        events = await asyncio.wait_for(_collect(client, handle.id), 60)
    assert isinstance(events[-1], RunEnded)
    streamed = {e.step_id for e in events if isinstance(e, TextDelta) and e.text}
    assert len(streamed) == turns


async def test_history_per_turn_stays_flat_with_streaming_on(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    turns = 20
    off = await _run_turns(client, task_queue, tmp_path, turns, streaming=False)
    on = await _run_turns(client, task_queue, tmp_path, turns, streaming=True)

    def mean(per: dict[int, int], turns: range) -> float:
        return sum(per[t] for t in turns) / len(turns)

    early, late = range(2, 11), range(11, turns)
    # Flat: a late turn costs what an early one does, with a reader attached all along.
    assert mean(on, late) < 1.2 * mean(on, early)
    # A watched run adds nothing per turn: neither its deltas nor its reader are recorded.
    assert mean(on, late) - mean(off, late) < 256
    print(
        f"history bytes/turn: off {mean(off, late):,.0f}, on {mean(on, late):,.0f} "
        f"(early on {mean(on, early):,.0f})"
    )


async def test_the_stream_carries_across_continue_as_new_without_gap_or_duplicate(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    agent = build_agent(
        Payments(tmp_path / "p.db"), long_script(12, pay_every=1000), limits=Limits(max_turns=50)
    )
    async with running_worker(client, [agent], task_queue):
        handle = await start_continuing(client, f"continued-{task_queue}", task_queue)
        live = await asyncio.wait_for(_collect(client, handle.id), 60)
        result = await handle.result()
        late = await asyncio.wait_for(_collect(client, handle.id), 30)
        status = await runs.status(client, handle.id)
    assert status.continues >= 1 and result.turns == 12
    lifecycle = _lifecycle(live)
    assert [e.offset for e in lifecycle] == list(range(len(lifecycle)))
    assert isinstance(lifecycle[-1], RunEnded)
    scheduled = [e.step_id for e in lifecycle if isinstance(e, StepScheduled)]
    whole, _ = await runs.whole_ledger(client, handle.id, result.ledger)  # archived steps too
    assert len(scheduled) == len(set(scheduled)) == len(whole)
    assert scheduled == [r.step_id for r in whole]
    assert [e.model_dump() for e in _lifecycle(late)] == [e.model_dump() for e in lifecycle]


def test_every_waiting_state_is_shown_parked() -> None:
    """`watch` marks a state parked when the run waits there for a person or a command; a run
    waiting for a client's answer or parked on an invalid final answer once showed as busy."""
    moving = {"starting", "running"}
    ended = {"done", "refused", "failed", "cancelled"}
    assert set(get_args(RunState)) - moving - ended == PARKED_STATES


async def test_a_reader_closes_the_live_stream_of_a_step_its_ended_run_never_finished(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """A reader started the open model step's live stream; the run is terminated mid-step (no
    step event ever says the step ended, and the activity leaves a cut attempt's stream open
    for a retry): seeing the run end, the reader ends the stream too, not its 2-hour lifetime."""
    agent = build_agent(Payments(tmp_path / "p.db"), long_script(2, pay_every=1000))
    scripted = ScriptedModel({agent.name: agent.script or []}, latency=30, chunks=30)
    async with running_worker(client, [agent], task_queue, scripted=scripted):
        handle = await start_run(client, "payer", "long", task_queue=task_queue)
        stream = client.get_workflow_handle(delta_stream_id(handle.id, "t1.model"))
        seen: list[RunEvent] = []

        async def follow() -> None:
            async for event in runs.events(client, handle.id):
                seen.append(event)

        reader = asyncio.create_task(follow())
        for _ in range(300):  # the reader found the open step and started its stream
            if any(isinstance(e, TextDelta) and e.text for e in seen):
                break
            await asyncio.sleep(0.1)
        assert (await stream.describe()).status == WorkflowExecutionStatus.RUNNING
        await handle.terminate("an operator ends it")
        await asyncio.wait_for(reader, 60)
        for _ in range(100):
            if (await stream.describe()).status != WorkflowExecutionStatus.RUNNING:
                break
            await asyncio.sleep(0.1)
    assert (await stream.describe()).status == WorkflowExecutionStatus.COMPLETED


class ReadThenLeft(ScriptedModel):
    """A reader starts the step's live stream and leaves before the step looks for it (its
    first look is `FIRST_LOOK` in): the step answers at once, having never seen a reader."""

    def __init__(self, scripts: dict, task_queue: str) -> None:
        super().__init__(scripts)
        self.task_queue = task_queue

    async def complete(self, request: ModelRequest) -> ModelResponse:
        stream = delta_stream_id(activity.info().workflow_id or "", request.step_id)
        await activity.client().start_workflow(
            LiveStreamWorkflow.run, id=stream, task_queue=self.task_queue
        )
        return await super().complete(request)


async def test_a_stream_a_reader_started_and_left_between_two_looks_ends_with_its_step(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    agent = build_agent(Payments(tmp_path / "p.db"), [reply(text("Done at once."))])
    scripted = ReadThenLeft({agent.name: agent.script or []}, task_queue)
    async with running_worker(client, [agent], task_queue, scripted=scripted):
        handle = await start_run(client, "payer", "quick", task_queue=task_queue)
        await handle.result()
        stream = client.get_workflow_handle(delta_stream_id(handle.id, "t1.model"))
        for _ in range(100):
            if (await stream.describe()).status != WorkflowExecutionStatus.RUNNING:
                break
            await asyncio.sleep(0.1)
    assert (await stream.describe()).status == WorkflowExecutionStatus.COMPLETED
