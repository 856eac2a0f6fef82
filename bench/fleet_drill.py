"""Fleet drill (Temporal's pre-production drill): kill workers at random until every run is done.

    python bench/fleet_drill.py [--runs 50 --workers 3 --kill-every 3 --seed 7] [--s3]

Starts its own dev server and `--workers` worker subprocesses on one queue, runs one reference
run uninterrupted, then starts `--runs` runs at once. Each run looks an invoice up, charges it
(an effect reconciled by its key) and sends a receipt (an idempotent effect) into a real SQLite
downstream. Every `--kill-every` seconds one random worker is SIGKILLed and started again, until
all runs are done. Reports completed runs, runs whose result differs from the reference,
duplicated effects (must be 0), effect executions, transcript resends after a run's first model
step (must be 0), kills and total time; exits non-zero if a promise broke. With `--s3` the
workers share no folder: both stores live in a bucket of a moto S3 server the drill starts, each
worker (and each restart) gets its own empty local folder, and nearly every payload (>= 256 B)
goes through the bucket. Default `StepOptions`: a killed tool step is retried after the 10 s tool
heartbeat timeout, a killed model step after the 60 s model heartbeat timeout.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import tempfile
import time
from collections import Counter
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from temporalio.api.enums.v1 import EventType  # noqa: E402
from temporalio.client import Client  # noqa: E402

from bench.fleet_agents import DB_ENV, Downstream  # noqa: E402
from bench.fleet_workers import start_worker, worker_env  # noqa: E402
from waypoint._activities.step_log import read_step_log  # noqa: E402
from waypoint.client import runs as waypoint_runs  # noqa: E402
from waypoint.protocol import ModelRequest, RunResult, StepOptions  # noqa: E402
from waypoint.testing import WorkerProcess  # noqa: E402

AGENT = "invoicer"
EFFECTS = ("charges", "receipts")


@dataclass
class DrillReport:
    """What the drill found; `ok` when every run completed as the reference did, effects once."""

    runs: int
    kills: int = 0
    seconds: float = 0.0
    completed: int = 0
    different: list[str] = field(default_factory=list)
    """Runs whose output or ledger shape differs from the uninterrupted reference run."""
    duplicated: int = 0
    """Effects beyond one per step (rows per run, plus inserts refused for an existing key)."""
    missing: int = 0
    """Completed effect steps with no row downstream."""
    effects: int = 0
    executions: int = 0
    """Effect tool bodies run, all attempts; more than `effects` means kills hit effects."""
    resends: int = 0
    """Model steps after a run's first that sent the whole transcript (no stored prefix)."""
    model_steps: int = 0
    """Model steps scheduled, all runs, all attempts."""
    moved: int = 0
    """Runs whose steps ran in more than one worker process."""
    local_files: int = 0
    """Files the workers wrote into their own local folders (`--s3`: must be 0)."""
    reconciled: int = 0
    """Effect steps found already done downstream after a kill, not run again."""
    re_executed: int = 0
    """Step executions beyond one per step, across all runs (work in flight at a kill)."""
    retries: Counter[str] = field(default_factory=Counter)
    """Why steps and workflow tasks were retried, from the runs' histories."""
    slowest: float = 0.0
    """Seconds from the drill's start to the last run's close."""
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Every run completed, each like the reference, every effect exactly once."""
        return (
            self.completed == self.runs
            and not self.different
            and not self.duplicated
            and not self.missing
            and not self.resends
            and not self.local_files
            and not self.problems
        )

    def summary(self) -> str:
        """The drill's figures, one per line."""
        lines = [
            f"completed runs      {self.completed} of {self.runs}"
            f" ({len(self.different)} differ from the uninterrupted run)",
            f"duplicated effects  {self.duplicated}",
            f"missing effects     {self.missing}",
            f"effects             {self.effects} (tool bodies run {self.executions} times,"
            f" {self.reconciled} reconciled after a kill)",
            f"steps re-executed   {self.re_executed}",
            f"transcript resends  {self.resends} after a run's first model step"
            f" ({self.model_steps} model steps; {self.moved} runs moved between workers)",
            f"local files         {self.local_files} written by workers to their own folders",
            f"kills               {self.kills}",
            *(f"  retried: {n} x {why}" for why, n in self.retries.most_common()),
            f"total time          {self.seconds:.1f} s",
            f"verdict             {'OK' if self.ok else 'FAILED'}",
        ]
        lines += [f"  {p}" for p in self.problems + self.different]
        return "\n".join(lines)


def _shape(result: RunResult) -> tuple:
    steps = tuple((r.step_id, r.kind, r.tool, r.status) for r in result.ledger)
    return result.output, result.stop_reason, result.turns, steps


class Fleet:
    """Worker subprocesses on one queue, any of which can be SIGKILLed and restarted."""

    def __init__(
        self,
        client: Client,
        env: dict[str, str],
        logs: Path,
        size: int,
        local: Path | None = None,
    ) -> None:
        self.client = client
        self.env = env
        self.logs = logs
        self.workers: list[WorkerProcess] = []
        self.size = size
        self.local = local
        """When set, every worker start gets a new empty folder here for its local stores."""
        self.starts = 0

    def _env(self) -> dict[str, str]:
        if self.local is None:
            return self.env
        self.starts += 1
        folder = self.local / f"start-{self.starts}"
        folder.mkdir(parents=True)
        return {
            **self.env,
            "WAYPOINT_PAYLOAD_STORE": str(folder / "payloads"),
            "WAYPOINT_TRANSCRIPT_STORE": str(folder / "transcripts"),
        }

    async def start(self) -> None:
        """Start every worker and wait until each polls."""
        self.logs.mkdir(parents=True, exist_ok=True)
        self.workers = list(
            await asyncio.gather(
                *(
                    start_worker(self.client, self._env(), self.logs / f"worker-{i}.log")
                    for i in range(self.size)
                )
            )
        )

    async def kill_and_restart(self, index: int) -> None:
        """SIGKILL one worker, then start it again and wait until it polls."""
        worker = self.workers[index]
        worker.kill()
        worker.env = self._env()
        await start_worker(self.client, worker.env, worker.log_path, worker)

    def stop(self) -> None:
        """SIGTERM every worker (SIGKILL any that cannot stop)."""
        for worker in self.workers:
            try:
                worker.stop()
            finally:
                worker.kill()


async def drill(
    client: Client,
    address: str,
    work: Path,
    *,
    runs: int,
    workers: int,
    kill_every: float,
    max_kills: int | None = None,
    seed: int = 7,
    options: StepOptions | None = None,
    task_timeout: timedelta | None = None,
    timeout: float = 1800.0,
    store_env: dict[str, str] | None = None,
) -> DrillReport:
    """Run the drill on the server at `address`; `client` must share its payload store.

    Args:
        client: Connected to the server with Waypoint's data converter (payloads under `work`).
        address: The server's address, for the worker subprocesses.
        work: A fresh folder for the stores, the downstream, the step log and worker logs.
        runs: Concurrent runs.
        workers: Worker subprocesses.
        kill_every: Seconds between a restarted worker polling and the next kill.
        max_kills: Stop killing after this many (None: until every run is done).
        seed: Picks which worker dies each time.
        options: The runs' step options (default `StepOptions()`).
        task_timeout: The runs' workflow task timeout (default Temporal's 10 s).
        timeout: Seconds before the drill gives up on the runs.
        store_env: Settings that put both stores elsewhere than `work` (`WAYPOINT_STORE`,
            AWS settings): then each worker start gets its own empty local folder, and
            `client` must use the same store.
    """
    rng = random.Random(seed)
    queue = f"drill-{int(time.time() * 1000)}"
    downstream = Downstream(work / "downstream.db")
    step_log = work / "steps.log"
    env = worker_env(
        address,
        queue,
        work,
        **{
            DB_ENV: str(downstream.path),
            "WAYPOINT_STEP_LOG": str(step_log),
            **(store_env or {}),
        },
    )
    local = work / "local" if store_env else None
    fleet = Fleet(client, env, work / "logs", workers, local)
    report = DrillReport(runs=runs)
    started = time.monotonic()

    async def start(workflow_id: str):  # noqa: ANN202
        return await waypoint_runs.start_run(
            client,
            AGENT,
            "charge invoice INV-7",
            task_queue=queue,
            workflow_id=workflow_id,
            options=options,
            task_timeout=task_timeout,
        )

    try:
        await fleet.start()
        reference = await (await start(f"{queue}-reference")).result()
        started = time.monotonic()
        handles = [await start(f"{queue}-{i}") for i in range(runs)]
        results = asyncio.gather(*(h.result() for h in handles))
        while not results.done() and (max_kills is None or report.kills < max_kills):
            await asyncio.wait([results], timeout=kill_every)
            if results.done():
                break
            await fleet.kill_and_restart(rng.randrange(workers))
            report.kills += 1
        finished = await asyncio.wait_for(results, timeout)
        report.seconds = time.monotonic() - started
    finally:
        fleet.stop()
    _judge(report, reference, dict(zip([h.id for h in handles], finished, strict=True)))
    _count(report, downstream, step_log, [h.id for h in handles])
    for h in handles:
        await _retries(client, h.id, report.retries)
        await _resends(client, h.id, report)
    if local is not None:
        report.local_files = sum(1 for p in local.rglob("*") if p.is_file())
    return report


async def _resends(client: Client, run: str, report: DrillReport) -> None:
    """Count model steps after the run's first that carried the whole transcript."""
    first, workers = True, set()
    async for event in waypoint_runs.handle(client, run).fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            workers.add(event.activity_task_started_event_attributes.identity.split("@")[0])
        if event.event_type != EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            continue
        attrs = event.activity_task_scheduled_event_attributes
        if attrs.activity_type.name != "waypoint.call_model":
            continue
        report.model_steps += 1
        # Decoded with the client's converter: the request may be a reference into the store.
        (request,) = await client.data_converter.decode(attrs.input.payloads, [ModelRequest])
        if not first and not request.prefix_hash:
            report.resends += 1
        first = False
    report.moved += len(workers) > 1


async def _retries(client: Client, run: str, seen: Counter[str]) -> None:
    """Count retried activities by step kind and last failure, and timed-out workflow tasks."""
    names: dict[int, str] = {}
    async for event in waypoint_runs.handle(client, run).fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            activity_id = event.activity_task_scheduled_event_attributes.activity_id
            names[event.event_id] = "model" if ".model" in activity_id else "tool"
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            attrs = event.activity_task_started_event_attributes
            if attrs.attempt > 1:
                why = attrs.last_failure.message or "unknown"
                seen[f"{names[attrs.scheduled_event_id]} step: {why}"] += attrs.attempt - 1
        elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT:
            seen["workflow task timed out"] += 1


def _judge(report: DrillReport, reference: RunResult, results: dict[str, RunResult]) -> None:
    expected = _shape(reference)
    for run, result in results.items():
        report.completed += 1
        if _shape(result) != expected:
            first = next(
                (
                    r
                    for r, e in zip(result.ledger, reference.ledger, strict=False)
                    if (r.step_id, r.status) != (e.step_id, e.status)
                ),
                None,
            )
            why = f"; first differing step {first.step_id}: {first.summary}" if first else ""
            report.different.append(f"{run}: {_shape(result)} vs {expected}{why}")
        for record in result.ledger:
            report.reconciled += record.reconciled


def _count(report: DrillReport, downstream: Downstream, step_log: Path, run_ids: list[str]) -> None:
    for run in run_ids:
        for table in EFFECTS:
            rows = downstream.rows(table, run)
            report.effects += rows
            report.duplicated += max(0, rows - 1)
            report.missing += rows == 0
        executions = read_step_log(step_log, run)
        report.re_executed += len(executions) - len({e.step_id for e in executions})
    report.duplicated += downstream.conflicts()
    reference_effects = sum(downstream.rows(t) for t in EFFECTS) - report.effects
    report.executions = downstream.executions() - reference_effects
    if reference_effects != len(EFFECTS):
        report.problems.append(f"the reference run left {reference_effects} effects")


async def main(runs: int, workers: int, kill_every: float, seed: int, s3: bool) -> bool:
    """Run the drill on a dev server of its own and print the figures."""
    from bench.harness import env
    from bench.object_store import fleet_client, fleet_store

    with tempfile.TemporaryDirectory(prefix="waypoint-drill-") as tmp:
        work = Path(tmp)
        async with env(work) as bench, AsyncExitStack() as stack:
            client, store_env = bench.client, None
            if s3:
                server, store_env = stack.enter_context(fleet_store(work))
                client = await fleet_client(server, bench.server.address)
            print(
                f"fleet drill: {runs} runs, {workers} workers, one SIGKILLed and restarted every "
                f"{kill_every:g} s until all runs are done (seed {seed})"
                + (", stores in a moto S3 bucket, no shared folder" if s3 else ""),
                flush=True,
            )
            report = await drill(
                client,
                bench.server.address,
                work,
                runs=runs,
                workers=workers,
                kill_every=kill_every,
                seed=seed,
                store_env=store_env,
            )
    print(report.summary())
    return report.ok


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--kill-every", type=float, default=3.0, help="seconds between kills")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--s3", action="store_true", help="share only a moto S3 bucket")
    args = parser.parse_args()
    ok = asyncio.run(main(args.runs, args.workers, args.kill_every, args.seed, args.s3))
    sys.exit(0 if ok else 1)
