"""A resumed run never splices a stale result into a changed run."""

from __future__ import annotations

import asyncio
import re
from datetime import timedelta
from pathlib import Path

import pytest
from pydantic import BaseModel
from temporalio import workflow
from temporalio.client import Client, WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from tests.agents import PAY_SCRIPT, Payments, build_agent, with_changed_pay, with_tools
from tests.cli import waypoint
from tests.conftest import running_worker, wait_for_state
from waypoint._tools import ToolContext, tool
from waypoint._workflows import AgentWorkflow
from waypoint.client import decisions, runs
from waypoint.errors import RunStuckError
from waypoint.protocol import Message, ResumeRequest, RunInput, RunResult, StepOptions, StepRecord
from waypoint.testing import reply, text, tool_use

FAST = StepOptions(
    retry_initial_interval=timedelta(milliseconds=50),
    retry_max_interval=timedelta(milliseconds=100),
)
HISTORY = Path(__file__).parent / "histories" / "approval.json"


@workflow.defn(name="AgentWorkflow")
class TaskRewritingWorkflow(AgentWorkflow):
    """A deploy that changes what the first model step consumes (it rewrites the task)."""

    @workflow.init
    def __init__(self, input: RunInput) -> None:
        super().__init__(input)
        append = self.steps.append

        def rewriting(message: Message) -> None:
            if not self.s.messages:
                block = message.content[0].model_copy(
                    update={"text": "Please: " + self.s.input.task}
                )
                message = message.model_copy(update={"content": [block]})
            append(message)

        self.steps.append = rewriting  # type: ignore[method-assign]

    @workflow.run
    async def run(self, input: RunInput) -> RunResult:
        return await super().run(input)


async def test_running_run_keeps_its_prompt_after_a_deploy(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    payments = Payments(tmp_path / "p.db")
    old = build_agent(payments, PAY_SCRIPT, approval=True)
    old.system = "prompt v1"
    async with running_worker(client, [old], task_queue):
        first = await runs.start_run(client, "payer", "pay", task_queue=task_queue)
        await wait_for_state(client, first.id, "awaiting_approval")
    new = build_agent(payments, PAY_SCRIPT, approval=True)
    new.system = "prompt v2"
    async with running_worker(client, [new], task_queue) as model:
        second = await runs.start_run(client, "payer", "pay", task_queue=task_queue)
        await wait_for_state(client, second.id, "awaiting_approval")
        await runs.approve(client, first.id, "t2.tool.1.pay", reviewer="me")
        await first.result()
    seen = {(r.step_id, r.system) for r in model.requests}
    assert seen == {("t1.model", "prompt v2"), ("t2.model", "prompt v2"), ("t3.model", "prompt v1")}


async def parked_by_a_changed_tool(client: Client, task_queue: str, payments: Payments) -> str:
    """A run approved to pay, then a deploy that changed `pay` under `on_change="refuse"`."""
    async with running_worker(
        client, [build_agent(payments, PAY_SCRIPT, approval=True)], task_queue
    ):
        handle = await runs.start_run(client, "payer", "pay", task_queue=task_queue, options=FAST)
        await wait_for_state(client, handle.id, "awaiting_approval")
    changed = with_changed_pay(build_agent(payments, PAY_SCRIPT), payments, "refuse")
    async with running_worker(client, [changed], task_queue):
        await runs.approve(client, handle.id, "t2.tool.1.pay", reviewer="me", remember="tool")
        status = await wait_for_state(client, handle.id, "tool_changed")
    assert status.detail.startswith("step t2.tool.1.pay: tool 'pay' changed since this run")
    assert payments.count() == 0
    return handle.id


async def test_changed_tool_with_refuse_parks_and_a_rollback_then_resume_runs_the_step(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    payments = Payments(tmp_path / "p.db")
    run = await parked_by_a_changed_tool(client, task_queue, payments)
    async with running_worker(
        client, [build_agent(payments, PAY_SCRIPT, approval=True)], task_queue
    ):  # the deploy rolled back
        await runs.handle(client, run).signal("resume", ResumeRequest(reviewer="ops"))
        result = await runs.handle(client, run).result()
    pay = next(r for r in result.ledger if r.step_id == "t2.tool.1.pay")
    assert (result.state, pay.status, payments.count()) == ("done", "completed", 1)
    assert [r.step_id for r in result.ledger].count("t2.tool.1.pay") == 1  # approved once
    # Judged once: the person's approval stays on the step, not the rule it taught ("remember").
    assert (pay.decided_by or "").startswith("me (") and "remembered" not in (pay.rule or "")


async def test_changed_tool_with_refuse_parks_and_resume_replan_tells_the_model(
    client: Client, task_queue: str, tmp_path: Path, cli_env: dict[str, str]
) -> None:
    payments = Payments(tmp_path / "p.db")
    run = await parked_by_a_changed_tool(client, task_queue, payments)
    shown = await asyncio.to_thread(waypoint, cli_env, "status", run)  # no worker up
    assert re.search(r"state\s+tool_changed", shown.stdout), (shown.stdout, shown.stderr)
    assert f"waypoint resume {run} --replan" in shown.stdout
    resumed = await asyncio.to_thread(waypoint, cli_env, "resume", run, "--replan")
    assert resumed.returncode == 0, resumed.stderr
    assert "the model is told its tool changed" in resumed.stdout
    changed = with_changed_pay(build_agent(payments, PAY_SCRIPT), payments, "refuse")
    async with running_worker(client, [changed], task_queue) as model:
        result = await runs.handle(client, run).result()
    steps = {r.step_id: r for r in result.ledger}
    assert steps["t2.tool.1.pay"].status == "error" and "t2.replan.2" in steps
    told = model.requests[-1].messages[-1].content[0]
    assert "was not run" in str(told) and "plan was updated to version 2" in str(told)
    assert (result.state, payments.count()) == ("done", 0)


async def test_changed_tool_with_replan_continues_with_the_new_tools(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    payments = Payments(tmp_path / "p.db")
    original = build_agent(payments, PAY_SCRIPT, approval=True)
    original.on_change = "replan"  # the policy is part of the spec the run snapshots
    async with running_worker(client, [original], task_queue):
        handle = await runs.start_run(client, "payer", "pay", task_queue=task_queue, options=FAST)
        await wait_for_state(client, handle.id, "awaiting_approval")
    changed = with_changed_pay(build_agent(payments, PAY_SCRIPT), payments, "replan")
    async with running_worker(client, [changed], task_queue) as model:
        await runs.approve(client, handle.id, "t2.tool.1.pay", reviewer="me")
        result = await handle.result()
        status = await runs.status(client, handle.id)
    steps = {r.step_id: r for r in result.ledger}
    assert steps["t2.tool.1.pay"].status == "error"
    assert "plan v2" in steps["t2.replan.2"].summary
    assert status.plan_version == 2
    (last,) = model.requests
    pay_schema = next(t for t in last.tools if t.name == "pay").input_schema
    assert "currency" in pay_schema["properties"]
    assert "plan was updated to version 2" in last.messages[-1].content[0].content  # type: ignore[union-attr]
    assert payments.count() == 0


async def test_changed_step_inputs_fail_replay_with_nondeterminism() -> None:
    history = WorkflowHistory.from_json("golden-approval", HISTORY.read_text())
    replayer = Replayer(workflows=[TaskRewritingWorkflow], data_converter=pydantic_data_converter)
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is not None
    assert "TMPRL1100" in str(result.replay_failure)
    assert "t1.model#" in str(result.replay_failure)


async def test_stuck_run_shows_the_nondeterminism_error_in_status(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    payments = Payments(tmp_path / "p.db")
    agent = build_agent(payments, PAY_SCRIPT, approval=True)
    async with running_worker(client, [agent], task_queue):
        handle = await runs.start_run(client, "payer", "pay", task_queue=task_queue)
        await wait_for_state(client, handle.id, "awaiting_approval")
    async with running_worker(
        client, [agent], task_queue, workflows=[TaskRewritingWorkflow], max_cached_workflows=0
    ):
        await handle.signal("approve", {"step_id": "t2.tool.1.pay", "reviewer": "me"})
        with pytest.raises(RunStuckError, match="TMPRL1100") as stuck:
            for _ in range(50):
                await runs.status(client, handle.id)
        assert "roll the worker back" in str(stuck.value)
        await handle.terminate("test over")
    assert payments.count() == 0


class RefundArgs(BaseModel):
    who: str


@tool("effect", requires_approval=True, idempotent=True)
async def refund(args: RefundArgs, ctx: ToolContext) -> str:
    """Refund someone."""
    return f"refunded {args.who}"


TWO_AT_ONCE = [
    reply(tool_use("refund", who="first")),
    reply(tool_use("pay", payee="ada", amount=5), tool_use("refund", who="bob")),
    reply(text("done")),
]


async def test_a_parallel_approval_does_not_hide_a_step_parked_in_tool_changed(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """`pay` parks while `refund`, beside it, waits for a person: approving `refund` used to set
    the run `running` over the park, and every `resume` after was refused (found in review)."""
    payments = Payments(tmp_path / "p.db")
    async with running_worker(
        client, [with_tools(build_agent(payments, TWO_AT_ONCE), refund)], task_queue
    ):
        handle = await runs.start_run(client, "payer", "pay", task_queue=task_queue, options=FAST)
        await wait_for_state(client, handle.id, "awaiting_approval")
    changed = with_changed_pay(
        with_tools(build_agent(payments, TWO_AT_ONCE), refund), payments, "refuse"
    )
    async with running_worker(client, [changed], task_queue):
        await runs.approve(client, handle.id, "t1.tool.1.refund", reviewer="me")
        deadline = asyncio.get_running_loop().time() + 60
        while True:  # both wait: pay parked, refund at its gate
            status = await runs.status(client, handle.id)
            if [p.step_id for p in status.pending_approvals] == ["t2.tool.2.refund"]:
                break
            assert asyncio.get_running_loop().time() < deadline, status
            await asyncio.sleep(0.05)
        assert status.state == "tool_changed", status
        await runs.approve(client, handle.id, "t2.tool.2.refund", reviewer="me")
        status = await wait_for_state(client, handle.id, "tool_changed")
        assert status.detail.startswith("step t2.tool.1.pay:")
        await runs.handle(client, handle.id).signal(
            "resume", ResumeRequest(reviewer="ops", replan=True)
        )
        result = await asyncio.wait_for(handle.result(), 60)
    steps = {r.step_id: r for r in result.ledger}
    assert result.state == "done" and "t2.replan.2" in steps
    assert (steps["t2.tool.1.pay"].status, steps["t2.tool.2.refund"].status) == (
        "error",
        "completed",
    )


async def test_a_steer_says_it_waits_for_the_park_and_a_cancel_records_the_step_not_run(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """Found in review: a steer's receipt said "goes with the results of t2.tool.1.pay" as if
    it ran, and a run cancelled while parked left the effect step `scheduled` (may have run)."""
    payments = Payments(tmp_path / "p.db")
    run = await parked_by_a_changed_tool(client, task_queue, payments)
    changed = with_changed_pay(build_agent(payments, PAY_SCRIPT), payments, "refuse")
    async with running_worker(client, [changed], task_queue):
        sent = await decisions.steer(client, run, "stop paying", reviewer="ops")
        assert sent.recorded, sent
        assert "parked in tool_changed" in sent.detail, sent.receipt
        assert "waypoint resume" in sent.detail
        await runs.handle(client, run).cancel()
        status = await wait_for_state(client, run, "cancelled")
        ledger = await runs.handle(client, run).query("ledger", result_type=list[StepRecord])
    pay = next(r for r in ledger if r.step_id == "t2.tool.1.pay")
    assert pay.status == "error" and pay.summary.startswith("cancelled while parked, not run")
    assert status.state == "cancelled" and payments.count() == 0
