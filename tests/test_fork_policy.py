"""A fork applies the policy its ledger shows: rule changes up to the fork point, no memories.

The fork keeps its source's ledger up to the fork point, `policy set` lines included, so it
applies the policy those lines put in force. Approvals a reviewer remembered on the source
were given for that run: the fork asks again, and its ledger says so.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from temporalio.client import Client, WorkflowHandle

from tests.agents import Payments
from tests.cli import waypoint
from tests.conftest import running_worker, wait_for_state
from tests.test_policies import ASK_PAY, echo, paid, payer, step
from waypoint.client import runs
from waypoint.client.decisions import set_policy, show_policy
from waypoint.protocol import RunResult, StepRecord
from waypoint.protocol.policy import ApprovalPolicy, Condition, Rule
from waypoint.testing import Script, reply, tool_use

ASK_BIG = ApprovalPolicy(
    rules=[Rule(tool="pay", when=[Condition(field="amount", op="gt", value=100)], action="ask")]
)
DENY_PAY = ApprovalPolicy(rules=[Rule(tool="pay", action="deny")])


def fork_line(ledger: list[StepRecord]) -> StepRecord:
    (line,) = [r for r in ledger if ".fork." in r.step_id]
    return line


@asynccontextmanager
async def paying_ada_then_cy(
    client: Client, task_queue: str, payments: Payments, amount: int
) -> AsyncIterator[WorkflowHandle[Any, RunResult]]:
    """A treasurer under `ASK_BIG` paying ada 500, then cy `amount`: asked for the first."""
    script: Script = [
        reply(tool_use("pay", payee="ada", amount=500)),
        reply(tool_use("pay", payee="cy", amount=amount)),
        echo,
    ]
    async with running_worker(client, [payer(payments, script, ASK_BIG)], task_queue):
        source = await runs.start_run(client, "treasurer", "pay", task_queue=task_queue)
        await wait_for_state(client, source.id, "awaiting_approval")
        yield source


async def test_fork_applies_the_policy_in_force_at_its_fork_point(
    client: Client, task_queue: str, cli_env: dict[str, str]
) -> None:
    payments = Payments(Path(cli_env["WAYPOINT_TEST_PAYMENTS"]))
    async with paying_ada_then_cy(client, task_queue, payments, 9) as source:
        sent = await set_policy(client, source.id, ASK_PAY, reviewer="lin", reason="ask all")
        assert sent.recorded and sent.step_id == "t1.policy.1"
        await runs.approve(client, source.id, "t1.tool.1.pay", reviewer="grace")
        held = await wait_for_state(client, source.id, "awaiting_approval")
        assert [p.step_id for p in held.pending_approvals] == ["t2.tool.1.pay"]
        # A change after the fork point is not the fork's: it gets the one its ledger shows.
        await set_policy(client, source.id, DENY_PAY, reviewer="lin", reason="stop paying")

        fork = await runs.fork(client, source.id, 1, task_queue=task_queue)
        waiting = await wait_for_state(client, fork.id, "awaiting_approval")
        assert [p.step_id for p in waiting.pending_approvals] == ["t2.tool.1.pay"]
        assert paid(payments, "cy") == 0  # the bug: the fork paid with no rule and no approval
        view = await show_policy(client, fork.id)
        assert (view.source, view.changes, view.policy) == ("changed", 1, ASK_PAY)
        assert "t1.policy.1" in waiting.policy and ASK_PAY.digest()[:12] in waiting.policy
        ledger = await runs.ledger(client, fork.id)
        assert "t2.policy.2" not in {r.step_id for r in ledger}
        line = fork_line(ledger)
        assert line.step_id == "t1.fork.1" and line.kind == "operator"
        assert source.id in line.summary and "t1.policy.1" in line.summary
        shown = await asyncio.to_thread(waypoint, cli_env, "status", fork.id)
        assert re.search(r"policy\s+.*t1\.policy\.1", shown.stdout), shown.stdout

        await runs.approve(client, fork.id, "t2.tool.1.pay", reviewer="grace")
        result = await fork.result()
        await runs.reject(client, source.id, "t2.tool.1.pay", reviewer="grace")
        await source.result()
    pay = step(result.ledger, "t2.tool.1.pay")
    assert pay.rule == "policy: rule 1 (pay -> ask)" and (pay.decided_by or "").startswith("grace")
    assert paid(payments, "cy") == 1


async def test_fork_asks_again_for_what_the_source_remembered(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    payments = Payments(tmp_path / "payments.db")
    async with paying_ada_then_cy(client, task_queue, payments, 900) as source:
        await runs.approve(client, source.id, "t1.tool.1.pay", reviewer="grace", remember="tool")
        done = await source.result()
        assert (step(done.ledger, "t2.tool.1.pay").decided_by or "").startswith("remembered:")

        fork = await runs.fork(client, source.id, 1, task_queue=task_queue)
        waiting = await wait_for_state(client, fork.id, "awaiting_approval")
        assert [p.step_id for p in waiting.pending_approvals] == ["t2.tool.1.pay"]
        assert (await show_policy(client, fork.id)).remembered == []
        ledger = await runs.ledger(client, fork.id)
        assert "t1.tool.1.pay.remember" in {r.step_id for r in ledger}  # kept, as history
        line = fork_line(ledger)
        assert "not carried" in line.summary and "pay" in line.summary, line.summary
        assert "spec" in waiting.policy and "remembered" not in waiting.policy
        await runs.approve(client, fork.id, "t2.tool.1.pay", reviewer="kim")
        result = await fork.result()
    assert (step(result.ledger, "t2.tool.1.pay").decided_by or "").startswith("kim")
    assert paid(payments, "cy") == 2  # the source's and the fork's, each approved


async def test_a_policy_sent_as_a_fork_starts_is_refused_and_the_fork_goes_on(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """A `set_policy` signal waiting in a fork's first task (sent while no worker was up) met a
    fork that never loads its spec in that segment: it waited for the spec, the fork waited for
    its handlers, and the fork hung. It is refused as the fork loads, and the fork ends."""
    import uuid

    from tests.agents import PAY_SCRIPT, build_agent
    from waypoint.client.runs import _start as start
    from waypoint.protocol import AgentState
    from waypoint.protocol.policy import PolicyChange
    from waypoint.protocol.queues import agent_queue
    from waypoint.protocol.run import ForkSource

    agent = build_agent(Payments(tmp_path / "p.db"), PAY_SCRIPT)
    async with running_worker(client, [agent], task_queue):
        source = await runs.start_run(client, "payer", "pay ada", task_queue=task_queue)
        await source.result()
        state = await source.query("fork_state", 1, result_type=AgentState)
    run = state.input.model_copy(
        update={
            "resume": None,
            "stream": None,
            "parent": None,
            "fork": ForkSource(workflow_id=source.id, after_turn=1),
        }
    )
    fork_id = f"{source.id}-fork-{uuid.uuid4().hex[:6]}"
    fork = await start(client, run, id=fork_id, task_queue=agent_queue(task_queue, "payer"))
    await fork.signal("set_policy", PolicyChange(policy=DENY_PAY, reviewer="lin", decision_id="s1"))
    async with running_worker(client, [agent], task_queue):
        result = await asyncio.wait_for(fork.result(), 60)
    assert result["state"] == "done", result
