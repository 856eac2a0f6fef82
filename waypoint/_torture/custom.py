"""`waypoint torture` on your own agent: seeded worker SIGKILLs and SIGTERMs, then the invariants.

Without knowing your tools it checks what holds for any agent: the same result and ledger as
an uninterrupted run, each effect once (your `count_effects`), only in-flight steps re-run, a
drained worker exits 0, no failed workflow task, every history replays.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from temporalio.client import Client

from waypoint._torture.invariants import histories
from waypoint.protocol import StepOptions
from waypoint.testing import KILL_TEST_OPTIONS, KillPoint, KillReport, run_kill_test


async def torture_agent(
    client: Client,
    *,
    app: str,
    agent: str,
    task: str,
    seed: int,
    workdir: Path,
    count_effects: Callable[[str], int],
    env: Mapping[str, str] | None = None,
    answers: Mapping[str, dict[str, Any]] | None = None,
    kills: int = 3,
    options: StepOptions = KILL_TEST_OPTIONS,
) -> tuple[KillReport, list[str]]:
    """One seed: stop the worker at `kills` seeded moments; the report and broken invariants.

    About one stop in three is a SIGTERM (a deploy's drain, `WAYPOINT_DRAIN_SECONDS`, 10 unless
    `env` sets it), the rest SIGKILLs (a lost machine). `answers` and `options` are the
    kill test's (`run_kill_test`): a question with no answer, or a run that ends or parks
    before a stop it can no longer reach, raises `KillTestError` and leaves no run behind.
    """
    rng = random.Random(seed)
    task_queue = f"torture-{seed}-{rng.randrange(10**6)}"
    points = []
    for _ in range(kills):
        point = KillPoint.after_seconds(rng.uniform(0.05, 1.5))
        points.append(point.gracefully() if rng.random() < 1 / 3 else point)
    report = await run_kill_test(
        client,
        app=app,
        agent=agent,
        task=task,
        task_queue=task_queue,
        workdir=workdir,
        kill_points=points,
        count_effects=count_effects,
        env={"WAYPOINT_DRAIN_SECONDS": "10", **(env or {})},
        timeout=120,
        answers=answers,
        options=options,
    )
    return report, report.violations + await histories(client, task_queue, agent)
