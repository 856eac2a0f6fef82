"""A `resume` that reaches the run in the same workflow task as the failure it is for (seed 6127).

The model step's last try fails while no worker runs the workflow; the operator's `resume`
comes before one is back, so the next workflow task carries both. Replay applies the signal
first, a live worker may apply the failure first: either way the run parks, wakes and goes on,
and its history replays. The real `anthropic` client against the local Messages API server.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer, Worker

from tests.agents import Payments, build_agent
from tests.conftest import Claude, wait_until
from tests.fake_messages_api import FakeMessagesAPI, text
from tests.test_model_outages import TWO_TRIES
from waypoint import WorkerOptions, build_worker
from waypoint._activities.model import ModelProvider
from waypoint._worker import workflow_runner
from waypoint._workflows.agent import AgentWorkflow
from waypoint.client import runs
from waypoint.protocol import (
    ModelRequest,
    ModelResponse,
    ResumeRequest,
    RunInput,
    RunResult,
)
from waypoint.protocol.queues import agent_queue


class Held:
    """A provider whose calls wait until the test lets them through."""

    def __init__(self, inner: ModelProvider) -> None:
        self.inner = inner
        self.gate = asyncio.Event()

    async def complete(self, request: ModelRequest) -> ModelResponse:
        await self.gate.wait()
        return await self.inner.complete(request)


def workflows_only(client: Client, queue: str) -> Worker:
    """A worker that runs the workflow and none of its steps."""
    return Worker(
        client,
        task_queue=queue,
        workflows=[AgentWorkflow],
        workflow_runner=workflow_runner(),
        sticky_queue_schedule_to_start_timeout=timedelta(seconds=1),
    )


async def has_event(handle: WorkflowHandle, kind: EventType.ValueType) -> bool:
    return any([e.event_type == kind async for e in handle.fetch_history_events()])


async def calling(handle: WorkflowHandle) -> bool:
    """Whether the run's model step is in flight."""
    raw = (await handle.describe()).raw_description
    return any(a.activity_type.name == "waypoint.call_model" for a in raw.pending_activities)


async def test_a_resume_in_the_same_task_as_the_failure_wakes_the_park(
    client: Client, task_queue: str, tmp_path: Path, claude: Claude
) -> None:
    with FakeMessagesAPI() as api:
        api.enqueue_error(429)
        api.enqueue_error(429)
        api.enqueue_message(text("Back."))
        held = Held(claude(api))
        agent = build_agent(Payments(tmp_path / "p.db"), script=[])
        queue = agent_queue(task_queue, agent.name)
        steps = build_worker(
            client,
            [agent],
            task_queue=task_queue,
            options=WorkerOptions(claude=held, live_text=False),
            workflows=[],
        )
        async with steps:
            async with workflows_only(client, queue):
                handle = await client.start_workflow(
                    "AgentWorkflow",
                    RunInput(agent=agent.name, task="hello", options=TWO_TRIES),
                    id=f"early-resume-{task_queue}",
                    task_queue=queue,
                    result_type=RunResult,
                )
                await wait_until(lambda: calling(handle), "the model step in flight")
            held.gate.set()  # both tries fail while no worker runs the workflow
            failed = EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED
            await wait_until(lambda: has_event(handle, failed), "the step's last try failed")
            await handle.signal("resume", ResumeRequest(reviewer="ops"))
            async with workflows_only(client, queue):
                result = await asyncio.wait_for(handle.result(), 60)
                status = await runs.status(client, handle.id)
    assert result.state == "done" and result.output == "Back."
    assert len(api.message_requests) == 3  # two failed tries, one after the resume
    (model,) = [r for r in result.ledger if r.kind == "model"]
    assert model.summary.startswith("end_turn") and status.ignored_signals == []
    history = await handle.fetch_history()
    replayer = Replayer(workflows=[AgentWorkflow], data_converter=pydantic_data_converter)
    await replayer.replay_workflow(history)  # raises on any nondeterminism


async def test_a_resume_while_running_with_no_park_is_refused_and_recorded(
    client: Client, task_queue: str, tmp_path: Path, claude: Claude
) -> None:
    with FakeMessagesAPI() as api:
        api.enqueue_message(text("Done."))
        held = Held(claude(api))
        agent = build_agent(Payments(tmp_path / "p.db"), script=[])
        async with build_worker(
            client, [agent], task_queue=task_queue, options=WorkerOptions(claude=held)
        ):
            handle = await client.start_workflow(
                "AgentWorkflow",
                RunInput(agent=agent.name, task="hello"),
                id=f"running-resume-{task_queue}",
                task_queue=agent_queue(task_queue, agent.name),
                result_type=RunResult,
            )
            await wait_until(lambda: calling(handle), "the model step in flight")
            await handle.signal("resume", ResumeRequest(reviewer="ops"))
            signalled = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
            await wait_until(lambda: has_event(handle, signalled), "the resume recorded")
            held.gate.set()
            result = await asyncio.wait_for(handle.result(), 60)
            status = await runs.status(client, handle.id)
    assert result.state == "done" and result.output == "Done."
    (refused,) = status.ignored_signals
    assert refused.signal == "resume" and refused.reason == "nothing to resume: the run was running"
