"""Kill tests: real worker subprocesses SIGKILLed mid-run, real SQLite downstream, real server.

Each asserts both promises: the run ends as an uninterrupted run does, and every effect
happened exactly once (counted by key in the downstream tables). Only work in flight at a kill
may run again; the harness (`waypoint.testing`) checks that against a step log.
"""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from tests.agents import Payments
from tests.conftest import wait_for_state
from waypoint._activities.step_log import read_step_log
from waypoint._operations.dev_server import free_port, start_dev_server
from waypoint.client import runs
from waypoint.demo import DEMO_TASK
from waypoint.demo.downstream import count_emails, count_vendors
from waypoint.protocol import ResumeRequest
from waypoint.settings import connect
from waypoint.testing import (
    KILL_TEST_OPTIONS,
    KillPoint,
    KillReport,
    WorkerProcess,
    completed_steps,
    run_kill_test,
)

ROOT = Path(__file__).parent.parent
HISTORIES = Path(__file__).parent / "histories"
DEMO_STEPS = [
    "t0.spec",
    "t1.model",
    "t1.tool.1.list_documents",
    "t2.model",
    "t2.tool.1.read_document",
    "t2.tool.2.read_document",
    "t3.model",
    "t3.tool.1.screen_sanctions",
    "t4.model",
    "t4.tool.1.create_vendor",
    "t5.model",
    "t5.tool.1.send_welcome_email",
]


def demo_env(env: WorkflowEnvironment, tmp_path: Path, latency: str = "0.3") -> dict[str, str]:
    return {
        "TEMPORAL_ADDRESS": env.client.service_client.config.target_host,
        "WAYPOINT_DEMO_DIR": str(tmp_path / "downstream"),
        "WAYPOINT_DEMO_BARRIER_DIR": str(tmp_path / "barriers"),
        "WAYPOINT_SCRIPTED_LATENCY": latency,
        "PYTHONPATH": str(ROOT),
    }


async def kill_demo(
    client: Client,
    env: WorkflowEnvironment,
    tmp_path: Path,
    task_queue: str,
    points: list[KillPoint],
    latency: str = "0.3",
) -> KillReport:
    downstream = tmp_path / "downstream"

    def count(key: str) -> int:
        return count_vendors(downstream, key) + count_emails(downstream, key)

    report = await run_kill_test(
        client,
        app="waypoint.demo:agents",
        agent="vendor_onboarding",
        task=DEMO_TASK,
        task_queue=task_queue,
        workdir=tmp_path / "killtest",
        kill_points=points,
        count_effects=count,
        env=demo_env(env, tmp_path, latency),
    )
    print(report.summary())
    assert report.ok, report.summary()
    assert report.effect_counts == {
        "t4.tool.1.create_vendor": 1,
        "t5.tool.1.send_welcome_email": 1,
    }
    assert count_vendors(downstream) == 2  # one for the reference run, one for the killed run
    assert count_emails(downstream) == 2
    return report


def barrier(tmp_path: Path, point: str, tool: str) -> KillPoint:
    folder = tmp_path / "barriers"
    return KillPoint.at_file(
        f"{point} in {tool}", folder / f"reached.{point}.{tool}", folder / f"{point}.{tool}"
    )


def step(report: KillReport, step_id: str):  # type: ignore[no-untyped-def]
    return next(r for r in report.result.ledger if r.step_id == step_id)


@pytest.mark.slow
async def test_kill_after_every_step_boundary(
    client: Client, env: WorkflowEnvironment, tmp_path: Path, task_queue: str
) -> None:
    points = [KillPoint.after_step(s) for s in DEMO_STEPS]
    report = await kill_demo(client, env, tmp_path, task_queue, points)
    assert len(report.kills) == len(DEMO_STEPS)
    in_flight = set().union(*(k.in_flight for k in report.kills))
    assert set(report.re_executed) <= in_flight
    model_calls = {s: n for s, n in report.executions.items() if s.endswith(".model")}
    assert set(model_calls) == {f"t{i}.model" for i in range(1, 7)}


async def test_kill_inside_effect_after_commit_is_reconciled(
    client: Client, env: WorkflowEnvironment, tmp_path: Path, task_queue: str
) -> None:
    report = await kill_demo(
        client, env, tmp_path, task_queue, [barrier(tmp_path, "after_commit", "create_vendor")]
    )
    create = step(report, "t4.tool.1.create_vendor")
    assert (create.attempt, create.reconciled) == (2, True)
    assert report.executions["t4.tool.1.create_vendor"] == 2  # once killed, once reconciled
    if os.environ.get("WAYPOINT_RECORD_HISTORIES"):
        history = await client.get_workflow_handle(report.run_id).fetch_history()
        (HISTORIES / "killed.json").write_text(history.to_json())


async def test_kill_inside_effect_before_commit_runs_it_once(
    client: Client, env: WorkflowEnvironment, tmp_path: Path, task_queue: str
) -> None:
    report = await kill_demo(
        client, env, tmp_path, task_queue, [barrier(tmp_path, "before_commit", "create_vendor")]
    )
    create = step(report, "t4.tool.1.create_vendor")
    assert (create.attempt, create.reconciled) == (2, False)


async def test_kill_while_awaiting_approval_keeps_the_approval_sent_meanwhile(
    client: Client, env: WorkflowEnvironment, tmp_path: Path, task_queue: str
) -> None:
    report = await kill_demo(client, env, tmp_path, task_queue, [KillPoint.awaiting_approval()])
    (kill,) = report.kills
    assert kill.in_flight == set()
    assert step(report, "t4.tool.1.create_vendor").status == "completed"


async def test_kill_after_the_step_that_opens_a_gate_then_at_the_gate(
    client: Client, env: WorkflowEnvironment, tmp_path: Path, task_queue: str
) -> None:
    # The gate opens milliseconds after t4.model completes; on a busy machine the harness first
    # sees the step done when the run already waits. It must kill there and keep the approval
    # for the next point, not approve the run past it (it did, and timed out in CI).
    at_gate = KillPoint.awaiting_approval()

    async def noticed_late(client: Client, run: str) -> bool:
        return await at_gate.reached(client, run)

    points = [KillPoint("after t4.model, noticed late", noticed_late), at_gate]
    report = await kill_demo(client, env, tmp_path, task_queue, points)
    assert [k.label for k in report.kills] == [
        "after t4.model, noticed late",
        "while awaiting approval",
    ]
    assert report.kills[1].in_flight == set()


async def test_sigkill_while_parked_in_tool_changed_then_a_rollback_pays_once(
    client: Client, env: WorkflowEnvironment, tmp_path: Path, task_queue: str
) -> None:
    """A deploy changes `pay` under `on_change="refuse"`: the run parks, that worker is
    SIGKILLed, `resume` is sent with no worker up, and the rolled-back build pays once."""
    payments = tmp_path / "payments.db"
    worker_env = {
        **os.environ,
        "TEMPORAL_ADDRESS": env.client.service_client.config.target_host,
        "WAYPOINT_TASK_QUEUE": task_queue,
        "WAYPOINT_TEST_PAYMENTS": str(payments),
        "PYTHONPATH": str(ROOT),
    }
    old = WorkerProcess("tests.cli_app:agents", worker_env, tmp_path / "old.log")
    new = WorkerProcess("tests.cli_app:changed_agents", worker_env, tmp_path / "new.log")
    try:
        old.start()
        handle = await runs.start_run(client, "payer", "pay ada 5", task_queue=task_queue)
        await wait_for_state(client, handle.id, "awaiting_approval")
        old.kill()
        new.start()  # the deploy
        await runs.approve(client, handle.id, "t2.tool.1.pay", reviewer="me")
        parked = await wait_for_state(client, handle.id, "tool_changed")
        new.kill()
        await runs.handle(client, handle.id).signal("resume", ResumeRequest(reviewer="ops"))
        old.start()  # rolled back
        result = await asyncio.wait_for(handle.result(), 60)
    finally:
        old.kill()
        new.kill()
    assert "step t2.tool.1.pay: tool 'pay' changed" in parked.detail
    pay = next(r for r in result.ledger if r.step_id == "t2.tool.1.pay")
    assert (result.state, pay.status) == ("done", "completed")
    assert Payments(payments).count() == 1


async def test_kill_during_parallel_fanout_keeps_finished_siblings(
    client: Client, env: WorkflowEnvironment, tmp_path: Path, task_queue: str
) -> None:
    hold = tmp_path / "hold"
    payments = Payments(tmp_path / "payments.db")

    def arm() -> None:
        hold.touch()

    def release() -> None:
        hold.unlink()

    point = KillPoint.after_step("t1.tool.1.fast")
    point.arm, point.release = arm, release
    report = await run_kill_test(
        client,
        app="tests.cli_app:fanout_agents",
        agent="fanout",
        task="fan out",
        task_queue=task_queue,
        workdir=tmp_path / "killtest",
        kill_points=[point],
        count_effects=payments.count,
        env={
            "TEMPORAL_ADDRESS": env.client.service_client.config.target_host,
            "WAYPOINT_TEST_PAYMENTS": str(tmp_path / "payments.db"),
            "FANOUT_HOLD": str(hold),
            "PYTHONPATH": str(ROOT),
        },
    )
    print(report.summary())
    assert report.ok, report.summary()
    (kill,) = report.kills
    assert kill.in_flight == {"t1.tool.2.slow_pay", "t1.tool.3.slow_pay"}
    assert report.executions["t1.tool.1.fast"] == 1
    assert report.executions["t1.tool.2.slow_pay"] == 2
    assert report.effect_counts == {"t1.tool.2.slow_pay": 1, "t1.tool.3.slow_pay": 1}


async def test_sigkilled_dev_server_restarted_on_its_sqlite_file_resumes_the_run(
    tmp_path: Path, task_queue: str
) -> None:
    state = tmp_path / "state"
    port, ui_port = free_port(), free_port()
    server = start_dev_server(state, port=port, ui_port=ui_port)
    address = server.address
    step_log = tmp_path / "steps.log"
    worker = WorkerProcess(
        "waypoint.demo:agents",
        {
            **os.environ,
            "TEMPORAL_ADDRESS": address,
            "WAYPOINT_TASK_QUEUE": task_queue,
            "WAYPOINT_STEP_LOG": str(step_log),
            "WAYPOINT_DEMO_DIR": str(tmp_path / "downstream"),
            "WAYPOINT_SCRIPTED_LATENCY": "0.3",
            "PYTHONPATH": str(ROOT),
        },
        tmp_path / "worker.log",
    )
    try:
        worker.start()
        client = await connect({"target_host": address})
        handle = await runs.start_run(
            client, "vendor_onboarding", DEMO_TASK, task_queue=task_queue, options=KILL_TEST_OPTIONS
        )
        for _ in range(200):
            done = await completed_steps(client, handle.id)
            if "t3.model" in done:
                break
            await asyncio.sleep(0.02)
        assert "t3.model" in done and "t5.model" not in done
        os.kill(server.process.pid, signal.SIGKILL)
        server.process.wait()
        await asyncio.sleep(1)
        server = start_dev_server(state, port=port, ui_port=ui_port)
        client = await connect({"target_host": address})
        status = await wait_for_state(client, handle.id, "awaiting_approval", timeout=60)
        (pending,) = status.pending_approvals
        await runs.approve(client, handle.id, pending.step_id, reviewer="me")
        result = await runs.handle(client, handle.id).result()
        assert worker.stop() == 0
    finally:
        worker.kill()
        server.stop()
    assert "Northwind Components GmbH is onboarded." in result.output
    downstream = tmp_path / "downstream"
    assert count_vendors(downstream) == 1 and count_emails(downstream) == 1
    executed = [e.step_id for e in read_step_log(step_log, handle.id)]
    assert executed.count("t1.model") == executed.count("t2.model") == 1
