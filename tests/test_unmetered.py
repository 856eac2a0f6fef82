"""A worker that may not describe its runs cannot read their history size: the run goes on.

Real dev server, real worker: the worker's Temporal client is refused `DescribeWorkflowExecution`
as a server with an authorizer refuses a key without the right (PERMISSION_DENIED), at the
client's call boundary. The run must neither retry the refused read for ever (held at its turn's
end) nor fail: it meters by its own estimate, says why once, and finishes.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from temporalio.client import (
    Client,
    DescribeWorkflowInput,
    Interceptor,
    OutboundInterceptor,
    WorkflowExecutionDescription,
)
from temporalio.service import RPCError, RPCStatusCode

from tests.agents import Payments, build_agent, long_script
from tests.conftest import running_worker, start_continuing
from waypoint._workflows.history_meter import UNMETERED
from waypoint.client import runs
from waypoint.protocol import HistoryLimits

BUDGET = HistoryLimits(max_events=40, keep_recent_turns=50)
"""Asked after turns 1 and 3 (a segment's steps may fill it), never after turn 2."""


class _RefuseDescribe(OutboundInterceptor):
    refused: list[str] = []
    """The workflow ids whose description was refused (the model step reads its live view too)."""

    async def describe_workflow(self, input: DescribeWorkflowInput) -> WorkflowExecutionDescription:
        _RefuseDescribe.refused.append(input.id)
        raise RPCError("Request unauthorized.", RPCStatusCode.PERMISSION_DENIED, b"")


class RefuseDescribe(Interceptor):
    """The client may run workflows and activities, but not describe a workflow."""

    def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
        return _RefuseDescribe(next)


async def test_a_run_whose_worker_may_not_describe_it_finishes_and_says_why_once(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    refused = Client(**{**client.config(), "interceptors": [RefuseDescribe()]})
    _RefuseDescribe.refused = []
    agent = build_agent(Payments(tmp_path / "p.db"), long_script(4, pay_every=99))
    async with running_worker(refused, [agent], task_queue):
        run = f"unmetered-{task_queue}"
        handle = await start_continuing(client, run, task_queue, history=BUDGET)
        result = await asyncio.wait_for(handle.result(), timeout=60)  # held for ever without it
        status = await runs.status(client, handle.id)
    assert result.output == "done after 4 turns"
    assert _RefuseDescribe.refused.count(handle.id) == 2  # a refusal is not retried
    assert status.continues == 2  # the estimate still hands over: the history stays bounded
    (line,) = [i for i in status.ignored_signals if i.signal == UNMETERED]  # said once a run
    assert line.step_id == "t1.history_size"
    assert "PERMISSION_DENIED" in line.reason and "estimated" in line.reason
