"""Prove it on your own agent: kill real worker processes mid-run and count what happened.

`run_kill_test` runs your agent once uninterrupted, then again while SIGKILLing its worker at
the points you choose, and reports whether the result (as you compare it) and the ledger match,
whether every effect happened exactly once (your `count_effects(effect_key)` asks the
downstream system, whatever the ledger says), and which steps ran again: only work that was in
flight at a kill may. Approvals are decided by your rule, in both runs alike.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from temporalio.client import Client, WorkflowHandle

from waypoint._activities.step_log import read_step_log
from waypoint.client import runs
from waypoint.protocol import RunResult, StepOptions, ToolOverride
from waypoint.testing import verdict
from waypoint.testing.driving import Approvals, Waiting, check_rule, drive
from waypoint.testing.kill_points import KillPoint
from waypoint.testing.report import KILL_TEST_OPTIONS, TASK_TIMEOUT, Kill, KillReport
from waypoint.testing.verdict import Compare
from waypoint.testing.worker_process import WorkerProcess, completed_steps


@dataclass
class _Plan:
    """What both runs share: where they run, what they get, how the harness decides."""

    client: Client
    worker: WorkerProcess
    start: Callable[[], Awaitable[WorkflowHandle[Any, RunResult]]]
    """Starts a run of the agent: the task, queue and options both runs get."""
    step_log: Path
    timeout: float
    answers: Mapping[str, dict[str, Any]]
    approvals: Approvals


class _Ran(NamedTuple):
    """One run as the harness drove it: the `KillReport` fields it fills."""

    result: RunResult
    kills: list[Kill]
    unreached: list[str]
    run_id: str


async def _run_once(plan: _Plan, name: str, kill_points: Sequence[KillPoint]) -> _Ran:
    """One run, killed at `kill_points`; a run the harness cannot finish is terminated."""
    plan.worker.start()
    handle = await plan.start()
    try:
        return await _kill_through(plan, name, handle.id, kill_points)
    except BaseException as err:  # never leave a run behind, waiting or running for ever
        with contextlib.suppress(Exception):
            await handle.terminate(reason=f"the kill test stopped: {err}"[:500])
        raise


async def _kill_through(plan: _Plan, name: str, run: str, kill_points: Sequence[KillPoint]) -> _Ran:
    client, worker, step_log, timeout = plan.client, plan.worker, plan.step_log, plan.timeout
    waiting = Waiting(plan.answers, plan.approvals)
    kills: list[Kill] = []
    unreached: list[str] = []
    for i, point in enumerate(kill_points):
        if unreached:  # the run ended before an earlier point's moment: none can follow
            unreached.append(point.label)
            continue
        point.arm()

        async def reached(point: KillPoint = point) -> bool:
            return await point.reached(client, run)

        goal = f"kill point {i + 1} ({point.label}) of {name}"
        if not await drive(
            client,
            run,
            goal,
            reached,
            waiting,
            timeout,
            approve=point.approve_on_the_way,
            answer=point.answer_on_the_way,
            ends_it=point.passes_at_end,
        ):
            point.release()
            unreached.append(point.label)
            continue
        completed = await completed_steps(client, run)
        code = await asyncio.to_thread(worker.stop) if point.graceful else None
        worker.kill()
        completed = await completed_steps(client, run) if point.graceful else completed
        started = {e.step_id for e in read_step_log(step_log, run)}
        kills.append(Kill(point.label, completed, started - completed, code))
        point.release()
        # Decisions and answers sent while no worker is up must not be lost; what the next
        # point waits for (a run parked at a gate) is held back until it is reached.
        following = kill_points[i + 1] if i + 1 < len(kill_points) else None
        await waiting.send(
            client,
            run,
            approve=following is None or following.approve_on_the_way,
            answer=following is None or following.answer_on_the_way,
        )
        worker.start()
    result_task = asyncio.ensure_future(runs.handle(client, run).result())

    async def done() -> bool:
        return result_task.done()

    await drive(client, run, f"the end of {name}", done, waiting, timeout, ends_it=True)
    result = await result_task  # a failed or cancelled run raises here, naming its cause
    code = worker.stop()
    if code != 0:
        raise RuntimeError(
            f"worker exited with {code} after a clean SIGTERM; see {worker.log_path}"
        )
    return _Ran(result, kills, unreached, run)


async def run_kill_test(
    client: Client,
    *,
    app: str,
    agent: str,
    task: str,
    task_queue: str,
    workdir: Path,
    kill_points: Sequence[KillPoint],
    count_effects: Callable[[str], int],
    env: Mapping[str, str] | None = None,
    timeout: float = 60.0,
    answers: Mapping[str, dict[str, Any]] | None = None,
    options: StepOptions = KILL_TEST_OPTIONS,
    compare: Compare = None,
    approvals: Approvals = "approve",
    tool_options: Mapping[str, ToolOverride | Mapping[str, Any]] | None = None,
) -> KillReport:
    """Run the agent uninterrupted, then with kills, and compare.

    Args:
        client: Connected to the server the worker subprocesses use (same env settings).
        app: `module:attribute` of the agents, as for `waypoint worker --app`.
        agent: The agent's name.
        task: The task both runs get.
        task_queue: A queue only these workers poll.
        workdir: Where worker logs and the step log go.
        kill_points: Where to SIGKILL the worker, in order.
        count_effects: How many times the downstream system saw an effect key. A sub-agent's
            effects are counted under their own keys, which extend its step's key
            (`KEY/child-step`), read from the child run's ledger.
        env: Environment for the workers (connection settings, your app's settings).
        timeout: Seconds to wait for each kill point and for the end of the run.
        answers: Results for client-answered tools, by tool name: a pending question of such
            a tool is answered like an approval is approved (by signal, so also between
            workers); a question of a tool not named here stops the test at once with a
            `KillTestError` saying which answer is missing.
        options: The step timeouts the runs get (`KILL_TEST_OPTIONS`, see `imposed`).
        compare: What of the two results must match: None, the whole result; a list of
            fields of the typed result (a result holding a downstream's ids differs in those
            ids, run to run: name the fields that must not); or a function of the `RunResult`.
        approvals: How the harness decides each approval, in both runs alike: `"approve"`,
            `"reject"`, or a function of the `PendingApproval` (its tool and arguments)
            returning True to approve, so a rejection path is kill-tested too.
        tool_options: Per-tool options both runs get over the agent's own, by tool name
            (`ToolOverride`: `timeout`, `fresh_for`, ...), recorded with each run.

    Raises:
        KillTestError: A run ended, parked or waited for a missing answer before a kill
            point (which it names), or did not reach it in `timeout`. The run is terminated.
    """
    check_rule(approvals)
    workdir.mkdir(parents=True, exist_ok=True)
    step_log = workdir / "steps.log"
    # The worker keeps its usual workflow cache: each kill empties it, so a resumed run replays
    # from history all the same. A cache of 0 (replay on every task) looked stricter, but the
    # harness's status queries then evicted runs in the middle of a local activity: a child's
    # tasks timed out over and over, and temporalio 1.35's core once failed a run for good
    # ("LA marker handling in invalid state"). No real worker runs with a cache of 0.
    worker_env = {
        **os.environ,
        **(env or {}),
        "WAYPOINT_TASK_QUEUE": task_queue,
        "WAYPOINT_STEP_LOG": str(step_log),
    }
    worker = WorkerProcess(app, worker_env, workdir / "worker.log")
    start = functools.partial(
        runs.start_run, client, agent, task, task_queue=task_queue, options=options,
        task_timeout=TASK_TIMEOUT, tool_options=tool_options or {},
    )  # fmt: skip
    plan = _Plan(client, worker, start, step_log, timeout, answers or {}, approvals)
    try:
        reference = await _run_once(plan, "the uninterrupted run", [])
        killed = await _run_once(plan, "the killed run", kill_points)
    finally:
        worker.kill()
    report = KillReport(reference=reference.result, **killed._asdict(), options=options)
    local: set[str] = set()
    for entry in read_step_log(step_log, killed.run_id):
        report.executions[entry.step_id] = report.executions.get(entry.step_id, 0) + 1
        report.attempts.setdefault(entry.step_id, []).append(entry.attempt)
        if entry.local:
            local.add(entry.step_id)
    for entry in read_step_log(step_log, reference.run_id):
        report.attempts.setdefault(f"reference {entry.step_id}", []).append(entry.attempt)
    verdict.judge(report, local, compare)
    await verdict.count(client, report, count_effects)
    return report
