"""The event stream tells each decision as it was made: a rejection is never an approval.

`waypoint watch` and every stream reader see `approval_decided` with `decision` set to what the
person did (approved, rejected, answered, resolved) and `approved` true for an approval alone,
signed or not.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from tests.agents import PAY_SCRIPT, Faults, Payments, build_agent
from tests.client_tool_app import asker
from tests.conftest import running_worker, wait_for_state
from waypoint._agent import Agent
from waypoint._security.signing import load_private_key, load_public_keys, new_key
from waypoint.client import runs
from waypoint.protocol import Resolution, StepOptions
from waypoint.protocol.events import ApprovalDecided, RunEvent, StepFailed

STEP = "t2.tool.1.pay"


class Reviewer:
    """Grace, with a signing key when the agent takes signed decisions only."""

    def __init__(self, signed: bool) -> None:
        private, public = new_key()
        self.signed = signed
        self.keys = load_public_keys(f"grace:{public}") if signed else None
        self.key = load_private_key(private) if signed else None

    def agent(self, agent: Agent) -> Agent:
        agent.signed_decisions = self.signed
        return agent

    def worker(self, client: Client, agent: Agent, task_queue: str) -> Any:
        extra = {"decision_keys": self.keys} if self.signed else {}
        return running_worker(client, [self.agent(agent)], task_queue, **extra)


async def decided(client: Client, run: str) -> tuple[list[ApprovalDecided], list[RunEvent]]:
    events = [e async for e in runs.events(client, run, live=False)]
    return [e for e in events if isinstance(e, ApprovalDecided)], events


@pytest.mark.parametrize("signed", [False, True], ids=["unsigned", "signed"])
@pytest.mark.parametrize("approve", [True, False], ids=["approve", "reject"])
async def test_an_approval_and_a_rejection_are_streamed_as_what_they_were(
    client: Client, task_queue: str, tmp_path: Path, signed: bool, approve: bool
) -> None:
    grace = Reviewer(signed)
    agent = build_agent(Payments(tmp_path / "p.db"), PAY_SCRIPT, approval=True)
    async with grace.worker(client, agent, task_queue):
        handle = await runs.start_run(client, "payer", "pay ada", task_queue=task_queue)
        await wait_for_state(client, handle.id, "awaiting_approval")
        await (runs.approve if approve else runs.reject)(
            client,
            handle.id,
            STEP,
            reviewer="grace",
            reason="" if approve else "not this month",
            signing_key=grace.key,
        )
        await handle.result()
        (event,), events = await asyncio.wait_for(decided(client, handle.id), 20)
    assert event.step_id == STEP and event.decided_by.startswith("grace")
    assert (event.approved, event.decision) == (approve, "approved" if approve else "rejected")
    failed = [e for e in events if isinstance(e, StepFailed) and e.step_id == STEP]
    assert [e.status for e in failed] == ([] if approve else ["rejected"])


async def test_an_answer_is_streamed_as_an_answer(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    async with running_worker(client, [asker(tmp_path / "notes.db")], task_queue):
        handle = await runs.start_run(client, "asker", "pick", task_queue=task_queue)
        status = await wait_for_state(client, handle.id, "awaiting_answer")
        (question,) = status.pending_questions
        await runs.answer(client, handle.id, question.step_id, {"choice": "red"}, reviewer="ada")
        await handle.result()
        (event,), _ = await asyncio.wait_for(decided(client, handle.id), 20)
    assert (event.step_id, event.decision, event.approved) == (question.step_id, "answered", False)
    assert event.decided_by.startswith("ada")


@pytest.mark.parametrize("signed", [False, True], ids=["unsigned", "signed"])
async def test_a_resolution_is_streamed_as_a_resolution(
    client: Client, task_queue: str, tmp_path: Path, signed: bool
) -> None:
    grace = Reviewer(signed)
    faults = Faults(lose_response=1_000, reconcile_unreachable=1_000)
    agent = build_agent(Payments(tmp_path / "p.db", faults), PAY_SCRIPT)
    options = StepOptions(tool_max_attempts=1)
    async with grace.worker(client, agent, task_queue):
        handle = await runs.start_run(
            client, "payer", "pay ada", task_queue=task_queue, options=options
        )
        await wait_for_state(client, handle.id, "needs_reconciliation")
        resolution = Resolution(step_id=STEP, action="abort", reviewer="grace", reason="checked")
        await runs.resolve(client, handle.id, resolution, signing_key=grace.key)
        await handle.result()
        (event,), _ = await asyncio.wait_for(decided(client, handle.id), 20)
    assert (event.step_id, event.decision, event.approved) == (STEP, "resolved", False)
    assert event.decided_by.startswith("grace")
