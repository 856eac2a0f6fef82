"""`waypoint deploy check`: each outcome on the dev server, from real histories.

A harmless refactor replays clean; a workflow that schedules something else first is caught
with the event; a changed tool schema is reported as the run's `on_change` will meet it; a run
pinned to its build is reported pinned; the CLI exits 1 and `set-current` refuses on a break.
"""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path

from temporalio.client import Client

from tests.agents import PAY_SCRIPT, Payments, build_agent, long_script, with_changed_pay
from tests.conftest import running_worker, start_continuing, wait_for_state, wait_for_visibility
from tests.deploy_builds import RefactoredWorkflow, TimerFirstWorkflow
from tests.test_changes import TaskRewritingWorkflow
from tests.test_versioning import make_current, park, versioned, waypoint_cli
from waypoint._operations.deploy_check import check_deploy
from waypoint.client import runs
from waypoint.protocol import Limits
from waypoint.protocol.queues import agent_queue

OPEN, DONE = " AND ExecutionStatus = 'Running'", " AND ExecutionStatus = 'Completed'"


def on_queue(task_queue: str, *agents: str) -> str:
    """This test's runs: each agent's runs are on its own queue (`waypoint.protocol.queues`)."""
    queues = ", ".join(f"'{agent_queue(task_queue, a)}'" for a in agents or ("payer",))
    return f"TaskQueue IN ({queues})"


async def test_a_harmless_refactor_passes_and_a_reordered_step_is_caught(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    agent = build_agent(Payments(tmp_path / "p.db"), PAY_SCRIPT, approval=True)
    async with running_worker(client, [agent], task_queue):
        finished = await park(client, task_queue)
        await runs.approve(client, finished.id, "t2.tool.1.pay", reviewer="me")
        await finished.result()
        waiting = await park(client, task_queue)
    waiting_open = f"{on_queue(task_queue)} AND WorkflowId = '{waiting.id}'{OPEN}"
    finished_done = f"{on_queue(task_queue)} AND WorkflowId = '{finished.id}'{DONE}"
    await wait_for_visibility(client, waiting_open, 1)  # each run, as itself: not one for the
    await wait_for_visibility(client, finished_done, 1)  # other while that one still lags
    clean = await check_deploy(
        client, [agent], workflows=[RefactoredWorkflow], query=on_queue(task_queue)
    )
    assert clean.ok and clean.counts()["replay_ok"] == 2  # the open run, and the closed one
    run, closed = clean.runs  # open runs first
    assert (run.run_id, run.open, run.agent, run.change) == (waiting.id, True, "payer", "none")
    assert (closed.run_id, closed.open) == (finished.id, False)

    broken = await check_deploy(
        client, [agent], workflows=[TimerFirstWorkflow], query=on_queue(task_queue)
    )
    assert not broken.ok
    run = broken.runs[0]
    assert run.replay == "nondeterministic" and run.fails
    assert "Nondeterminism" in run.error or "nondetermin" in run.error.lower(), run.error
    assert broken.counts()["nondeterministic"] == 2  # the closed one could not replay either


async def test_a_changed_tool_is_reported_as_each_runs_on_change_will_meet_it(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    payments = Payments(tmp_path / "p.db")
    refusing = build_agent(payments, PAY_SCRIPT, approval=True)
    replanning = build_agent(payments, PAY_SCRIPT, approval=True, name="replanner")
    replanning.on_change = "replan"
    async with running_worker(client, [refusing, replanning], task_queue):
        await park(client, task_queue)
        await park(client, task_queue, agent="replanner")
    new_build = [
        with_changed_pay(build_agent(payments, PAY_SCRIPT), payments, "refuse"),
        with_changed_pay(build_agent(payments, PAY_SCRIPT, name="replanner"), payments, "refuse"),
    ]
    scope = on_queue(task_queue, "payer", "replanner")
    await wait_for_visibility(client, scope + OPEN, 2)
    report = await check_deploy(client, new_build, query=scope)
    assert report.ok  # nothing breaks: one run will park, the other replan
    by_agent = {r.agent: r for r in report.runs}
    assert by_agent["payer"].change == "refuse" and by_agent["replanner"].change == "replan"
    assert by_agent["payer"].differences == [
        "tool 'pay': description changed; arguments added: currency; arguments changed: amount"
    ]
    counts = report.counts()
    assert (counts["would_refuse"], counts["would_replan"]) == (1, 1)


async def test_a_run_pinned_to_its_build_is_reported_pinned(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    dep = f"wp{uuid.uuid4().hex[:8]}"
    payments = Payments(tmp_path / "p.db")
    agent = build_agent(payments, PAY_SCRIPT, approval=True)
    async with running_worker(client, [agent], task_queue, **versioned(dep, "v1")):
        await make_current(client, dep, "v1")
        await park(client, task_queue)
    changed = with_changed_pay(build_agent(payments, PAY_SCRIPT), payments, "refuse")
    await wait_for_visibility(client, on_queue(task_queue) + OPEN, 1)
    report = await check_deploy(client, [changed], query=on_queue(task_queue))
    (run,) = report.runs
    assert run.pinned == f"{dep}.v1" and run.change == "refuse"
    assert report.counts()["pinned"] == 1 and report.counts()["would_refuse"] == 0


async def test_the_cli_exits_1_on_a_break_and_set_current_refuses_without_force(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """An auto-upgrade run recorded by other workflow code (an older build) breaks on this one."""
    dep = f"wp{uuid.uuid4().hex[:8]}"
    agent = build_agent(Payments(tmp_path / "p.db"), PAY_SCRIPT, approval=True)
    agent.versioning = "auto_upgrade"
    older = {"workflows": [TaskRewritingWorkflow], **versioned(dep, "v1")}
    async with running_worker(client, [agent], task_queue, **older):
        await make_current(client, dep, "v1")
        run = await park(client, task_queue)
        await wait_for_visibility(client, f"TemporalWorkerDeployment = '{dep}'" + OPEN, 1)
        app = ["--app", "examples.payments:agents"]  # the new build: its own payer
        scope = [*app, "--query", f"TemporalWorkerDeployment = '{dep}'"]
        code, said = await waypoint_cli(client, "deploy", "check", *scope, "--json")
        assert code == 1, said
        report = json.loads(said[said.index("{\n") :])  # after the replayer's log line
        assert report["ok"] is False and report["counts"]["nondeterministic"] == 1
        assert report["runs"][0]["run_id"] == run.id and report["runs"][0]["open"] is True
        code, said = await waypoint_cli(client, "deploy", "check", *scope)
        assert code == 1 and "non-deterministic" in said and run.id in said, said
        assert re.search(rf"{run.id} \(open\) at event \d+, step t1\.model", said), said
        routing = ["deploy", "set-current", "v1", "--deployment", dep, *app]
        code, said = await waypoint_cli(client, *routing)
        assert code == 1 and "deploy check found open runs this build breaks" in said, said
        code, said = await waypoint_cli(client, *routing, "--force")
        assert code == 0 and "routing anyway" in said and "new runs go to v1" in said, said
        unknown = ["deploy", "set-current", "v1", "--deployment", dep, "--app", "nosuch:agents"]
        code, said = await waypoint_cli(client, *unknown)
        assert code == 1 and "or --force to route without it" in said, said
        code, said = await waypoint_cli(client, *unknown, "--force")
        assert code == 0 and "deploy check skipped (--force)" in said, said


async def test_a_run_parked_in_tool_changed_is_listed_with_its_command(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    payments = Payments(tmp_path / "p.db")
    changed = with_changed_pay(build_agent(payments, PAY_SCRIPT), payments, "refuse")
    async with running_worker(
        client, [build_agent(payments, PAY_SCRIPT, approval=True)], task_queue
    ):
        run = await park(client, task_queue)
    async with running_worker(client, [changed], task_queue):
        await runs.approve(client, run.id, "t2.tool.1.pay", reviewer="me")
        await wait_for_state(client, run.id, "tool_changed")
    await wait_for_visibility(client, on_queue(task_queue) + OPEN, 1)
    report = await check_deploy(client, [changed], query=on_queue(task_queue))
    (checked,) = report.runs
    assert checked.parked and checked.change == "refuse" and report.counts()["parked"] == 1


async def test_a_continued_run_is_one_run_and_an_agent_the_build_lacks_breaks_it(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """Segments closed by continue-as-new are not runs of their own (each was once counted, the
    latest segment replayed for all); an open run whose agent is gone from the build fails."""
    payments = Payments(tmp_path / "p.db")
    agent = build_agent(
        payments,
        long_script(15),
        limits=Limits(max_turns=50),
        approval=lambda a: a.amount >= 12,
    )
    async with running_worker(client, [agent], task_queue):
        handle = await start_continuing(client, f"can-{task_queue}", task_queue)
        status = await wait_for_state(client, handle.id, "awaiting_approval", timeout=120)
    assert status.continues >= 1, status
    await wait_for_visibility(client, f"WorkflowId = '{handle.id}'" + OPEN, 1)
    report = await check_deploy(client, [agent], query=f"WorkflowId = '{handle.id}'")
    (run,) = report.runs
    assert run.open and run.replay == "ok" and report.ok
    stranger = build_agent(payments, long_script(15), name="someone_else")
    gone = await check_deploy(client, [stranger], query=f"WorkflowId = '{handle.id}'")
    (run,) = gone.runs
    assert run.change == "unknown" and run.fails and not gone.ok
