"""The payer's run, opened the way most tests open it: a worker, a started run, a state reached."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from temporalio.client import Client, WorkflowHandle

from tests.agents import PAY_SCRIPT, Faults, Payments, build_agent
from tests.conftest import running_worker, wait_for_state
from waypoint._agent import Agent
from waypoint._providers.scripted import ScriptedModel
from waypoint.client import runs
from waypoint.protocol import PendingApproval, RunResult, RunStatus
from waypoint.testing import Script


@dataclass
class PayerRun:
    """What a test of the payer reads: its run, the scripted model, the downstream, the agent."""

    handle: WorkflowHandle[Any, RunResult]
    model: ScriptedModel
    payments: Payments
    agent: Agent
    status: RunStatus | None
    """The run's status once it reached the state it was opened to wait for."""

    @property
    def pending(self) -> PendingApproval:
        """The one call the run waits to have approved."""
        assert self.status is not None
        (pending,) = self.status.pending_approvals
        return pending


@asynccontextmanager
async def open_payer(
    client: Client,
    task_queue: str,
    db: Path,
    *,
    until: str | None = None,
    approval: bool = False,
    faults: Faults | None = None,
    script: Script = PAY_SCRIPT,
    task: str = "pay ada 5",
    worker: dict[str, Any] | None = None,
    **start: Any,
) -> AsyncIterator[PayerRun]:
    """Run the payer on `db` on its own worker, started with `task` (and `start`'s `start_run`
    options) and, given `until`, waited for until it reaches that state."""
    payments = Payments(db, faults)
    agent = build_agent(payments, script, approval=approval)
    async with running_worker(client, [agent], task_queue, **(worker or {})) as model:
        handle = await runs.start_run(client, "payer", task, task_queue=task_queue, **start)
        status = None if until is None else await wait_for_state(client, handle.id, until)
        yield PayerRun(handle, model, payments, agent, status)
