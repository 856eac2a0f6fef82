"""Sub-agents (`Agent.as_tool`): a child workflow behind the one tool funnel, on a real server."""

from __future__ import annotations

import json
from pathlib import Path

from temporalio.client import Client, WorkflowExecutionStatus

from tests.conftest import running_worker, wait_for_state
from tests.subagent_agents import CheckResult, build_agents, count_under, keys
from waypoint import runs


async def test_sub_agent_runs_as_a_child_with_typed_io_and_a_linked_ledger(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    db = tmp_path / "pay.db"
    buyer, checker = build_agents(db)
    async with running_worker(client, [buyer, checker], task_queue):
        handle = await runs.start_run(client, "buyer", "buy from acme", task_queue=task_queue)
        result = await handle.result()

    step = next(r for r in result.ledger if r.tool == "check_supplier")
    assert step.status == "completed"
    assert step.child_workflow_id == f"{handle.id}--t1.tool.1.check_supplier"
    assert step.child_run_id
    answer = CheckResult.model_validate_json(result.output.removeprefix("Bought. Check: "))
    assert answer == CheckResult(supplier="acme", approved=True, deposit_paid=7)

    child = runs.handle(client, step.child_workflow_id)
    child_result = await child.result()
    assert child_result.output_as(CheckResult) == answer
    assert (await child.describe()).status == WorkflowExecutionStatus.COMPLETED
    child_pay = next(r for r in child_result.ledger if r.tool == "pay")
    # The child's effect key extends the parent step's key, not the child's own run id.
    assert step.effect_key is not None
    assert child_pay.effect_key == f"{step.effect_key}/t1.tool.1.pay"
    assert keys(db) == [child_pay.effect_key]
    assert count_under(db, step.effect_key) == 1
    # The parent's totals include the child's tokens.
    assert step.tokens == child_result.total_tokens > 0
    own = sum(r.tokens for r in result.ledger if r.kind == "model")
    assert result.total_tokens == own + child_result.total_tokens


async def test_invalid_arguments_never_start_a_child(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    from waypoint.scripted import reply, text, tool_use

    script = [
        reply(tool_use("check_supplier", supplier="acme", deposit=-1)),
        reply(text("gave up")),
    ]
    buyer, checker = build_agents(tmp_path / "pay.db", buyer_script=script)
    async with running_worker(client, [buyer, checker], task_queue) as scripted:
        handle = await runs.start_run(client, "buyer", "buy", task_queue=task_queue)
        result = await handle.result()
    step = next(r for r in result.ledger if r.tool == "check_supplier")
    assert step.status == "error" and step.child_workflow_id is None
    assert "deposit" in step.summary
    assert not any(r.agent == "checker" for r in scripted.requests)
    assert json.loads(json.dumps(keys(tmp_path / "pay.db"))) == []


async def test_sub_agent_call_waits_for_approval_like_any_tool(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    buyer, checker = build_agents(tmp_path / "pay.db", approval=True)
    async with running_worker(client, [buyer, checker], task_queue):
        handle = await runs.start_run(client, "buyer", "buy", task_queue=task_queue)
        status = await wait_for_state(client, handle.id, "awaiting_approval")
        assert [p.step_id for p in status.pending_approvals] == ["t1.tool.1.check_supplier"]
        assert keys(tmp_path / "pay.db") == []
        await runs.decide(client, handle.id, "t1.tool.1.check_supplier", approve=True, reviewer="ann")
        result = await handle.result()
    assert "deposit_paid" in result.output
