"""The procurement example end to end: MCP, sub-agent, client answer, policy, kill test."""

from __future__ import annotations

import dataclasses
import re
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from examples.procurement import ANSWER, SANCTIONED_TASK, TASK, build_agents
from examples.procurement import killtest as procurement_killtest
from examples.procurement.downstream import count_effects, count_orders
from tests.conftest import running_worker, wait_for_state
from tests.support.commands import long_command
from waypoint.client import runs
from waypoint.protocol import RunResult
from waypoint.testing import KillPoint, run_kill_test

ROOT = Path(__file__).parent.parent
BIN = Path(sys.executable).parent
ASK = "t4.tool.1.ask_requester"
ORDER = "t5.tool.1.place_order"
CHECK = "t3.tool.1.check_supplier"
CHECKED = f"{CHECK} > t2.tool.1.record_check"
"""The sub-agent's effect, counted under its own key (the kill test reads the child's ledger)."""


@asynccontextmanager
async def procurement(
    client: Client, task_queue: str, folder: Path, task: str
) -> AsyncIterator[WorkflowHandle[Any, RunResult]]:
    """The example's buyer and checker on a worker of their own, and the buyer's run of `task`;
    the buyer's MCP server is closed after."""
    buyer, checker = build_agents(folder)
    try:
        async with running_worker(client, [buyer, checker], task_queue):
            yield await runs.start_run(client, "procurement", task, task_queue=task_queue)
    finally:
        await buyer.aclose()


async def test_order_is_confirmed_approved_and_placed_once(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    async with procurement(client, task_queue, tmp_path, TASK) as handle:
        status = await wait_for_state(client, handle.id, "awaiting_answer", timeout=60)
        (question,) = status.pending_questions
        assert question.step_id == ASK and question.arguments["proposed_quantity"] == 12
        await runs.answer(client, handle.id, ASK, ANSWER, reviewer="requester")
        status = await wait_for_state(client, handle.id, "awaiting_approval")
        (pending,) = status.pending_approvals
        assert pending.step_id == ORDER and pending.arguments["total_eur"] == 4668.0
        await runs.approve(client, handle.id, ORDER, reviewer="cfo")
        result = await handle.result()
    assert result.output == (
        "Ordered 12 x DSK-1400 from Lindqvist Office Furniture AB for 4668.00 EUR, "
        "delivery by 2026-03-31."
    )
    steps = {r.step_id: r for r in result.ledger}
    assert steps["t1.tool.1.search_catalogue"].decided_by.startswith("policy: rule 3 (allow reads")
    assert steps[ORDER].decided_by.startswith("cfo")  # the policy asked; the reviewer decided
    assert steps[ORDER].rule and "ask" in steps[ORDER].rule
    assert steps[ORDER].status == "completed" and steps[CHECK].status == "completed"
    for step in (CHECK, ORDER):  # the check's audit row (in the child) and the order, once each
        assert count_effects(tmp_path, steps[step].effect_key) == 1
    assert count_orders(tmp_path) == 1


async def test_order_to_a_sanctioned_country_is_denied_by_policy(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    answer = {"confirmed": True, "quantity": 2, "deliver_by": "2026-06-30"}
    async with procurement(client, task_queue, tmp_path, SANCTIONED_TASK) as handle:
        await wait_for_state(client, handle.id, "awaiting_answer", timeout=60)
        await runs.answer(client, handle.id, ASK, answer, reviewer="requester")
        result = await handle.result()
    order = next(r for r in result.ledger if r.step_id == ORDER)
    assert order.status == "rejected" and order.effect_key
    assert order.decided_by == "policy: rule 1 (deny sanctioned countries)"
    assert result.output.startswith("No purchase order was placed: The call to place_order was")
    assert count_orders(tmp_path) == 0


@pytest.mark.slow
async def test_kills_in_the_child_the_question_the_approval_and_the_order_change_nothing(
    client: Client, env: WorkflowEnvironment, tmp_path: Path, task_queue: str
) -> None:
    folder, barriers = tmp_path / "downstream", tmp_path / "barriers"
    example = procurement_killtest.example(folder)
    approval = KillPoint.awaiting_approval()  # also arms the order's barrier, for the last kill
    approval = dataclasses.replace(
        approval, arm=lambda: (barriers / "before_commit.place_order").touch()
    )
    points = [
        KillPoint.at_file(
            "child's record_check after commit",
            barriers / "reached.after_commit.record_check",
            barriers / "after_commit.record_check",
        ),
        KillPoint.awaiting_answer(),  # the answer is then sent while no worker is up
        approval,  # so is the approval
        KillPoint.at_file(
            "place_order before commit", barriers / "reached.before_commit.place_order"
        ),
    ]
    report = await run_kill_test(
        client,
        app=example.app,
        agent=example.agent,
        task=example.task,
        task_queue=task_queue,
        workdir=tmp_path / "killtest",
        kill_points=points,
        count_effects=example.count_effects,
        env={
            **example.env,
            "TEMPORAL_ADDRESS": env.client.service_client.config.target_host,
            "WAYPOINT_DEMO_BARRIER_DIR": str(barriers),
            "WAYPOINT_SCRIPTED_LATENCY": "0.2",
            "PYTHONPATH": str(ROOT),
        },
        timeout=120,
        answers=example.answers,
    )
    print(report.summary())
    assert report.ok, report.summary()
    assert len(report.kills) == 4
    assert report.effect_counts == {CHECKED: 1, ORDER: 1}
    assert count_orders(folder) == 2  # one for the reference run, one for the killed run
    order = next(r for r in report.result.ledger if r.step_id == ORDER)
    assert order.attempt >= 2 and order.decided_by and order.decided_by.startswith("kill-test")


@pytest.mark.slow
def test_killtest_cli_proves_the_procurement_example(env: WorkflowEnvironment) -> None:
    proc = long_command(
        env, "killtest", "--example", "procurement", "--kills", "3", TEMPORAL_NAMESPACE="default"
    )
    print(proc.stdout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "3 kills, OK" in proc.stdout
    counts = re.search(r"effects: (\{.*\})", proc.stdout)
    assert counts is not None, proc.stdout
    assert counts.group(1) == f"{{'{CHECKED}': 1, '{ORDER}': 1}}"
