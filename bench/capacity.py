"""A capacity plan from measured figures: what a load needs in history, cores and object storage.

    python bench/capacity.py --measure [--save figures.json] [--runs-per-day N --steps-per-run N]
    python bench/capacity.py --figures figures.json --runs-per-day 100000 --steps-per-run 40

`--measure` runs the per-step bench for Waypoint alone on its own dev server (about a minute) and
reads, per step: history events, history bytes and Temporal actions from the run's history,
server and worker CPU from /proc, and object-store bytes from the payload and transcript stores.
`--figures` takes the same figures from JSON (edit them to plan for bigger tool outputs). The
plan prints every input, every assumption and the arithmetic, so a reader can redo it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import statistics
import sys
import tempfile
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.stats import table  # noqa: E402

DAY = 86_400
# Published by Temporal (docs.temporal.io/cloud/limits): a Cloud namespace's default floor.
CLOUD_NAMESPACE_APS = 500
CLOUD_NAMESPACE_RPS = 2_000
# Assumed, not published: what one task queue dispatches with its default 4 partitions.
TASK_QUEUE_TASKS_PER_S = 1_000


@dataclass(frozen=True)
class Figures:
    """What one agent step costs, as measured (or edited for a heavier workload)."""

    events_per_step: float
    history_bytes_per_step: float
    actions_per_step: float
    """Billable actions (activities, local activities, upserts, starts, signals) per step."""
    tasks_per_step: float
    """Workflow tasks plus activity tasks dispatched per step: task-queue load."""
    server_cpu_ms_per_step: float
    """Dev server (frontend, history, matching and SQLite in one process) CPU per step."""
    worker_cpu_ms_per_step: float
    """Worker (and client) process CPU per step: Waypoint's own cost, no tool or model work."""
    store_bytes_per_step: float
    """Bytes written to the payload and transcript stores per step (the object store)."""
    cached_run_mb: float = 0.3
    """Worker memory a parked run holds while cached (bench/parked.py, docs/performance.md)."""
    source: str = "measured"


@dataclass(frozen=True)
class Load:
    """The load to plan for."""

    runs_per_day: float
    steps_per_run: float
    parked_runs: float
    retention_days: float
    peak_factor: float
    utilisation: float
    workers_cache: int


def _store_bytes(*folders: Path) -> int:
    return sum(f.stat().st_size for d in folders if d.exists() for f in d.rglob("*") if f.is_file())


async def measure(steps: int, reps: int) -> Figures:
    """Run Waypoint's per-step bench once on its own dev server and read the figures per step."""
    from temporalio.api.enums.v1 import EventType as E

    from bench import history
    from bench.harness import env
    from bench.per_step import WAYPOINT, per_step

    with tempfile.TemporaryDirectory(prefix="waypoint-capacity-") as tmp:
        work = Path(tmp)
        async with env(work) as bench:
            result = await per_step(bench, steps, reps, systems=(WAYPOINT,))
            events = await history.fetch(bench.client, result.runs[WAYPOINT])
            # Every Waypoint run of the bench: one warm-up, one uncounted, `reps` counted.
            stored = _store_bytes(work / "payloads", work / "transcripts") / (steps * (reps + 2))
    shape = history.anatomy(events, steps)
    kinds = Counter(ev.event_type for ev in events)
    actions = sum(
        kinds[k]
        for k in (
            E.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED,
            E.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED,
            E.EVENT_TYPE_MARKER_RECORDED,
            E.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES,
            E.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED,
            E.EVENT_TYPE_TIMER_STARTED,
            E.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW,
        )
    )
    tasks = (
        kinds[E.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED] + kinds[E.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED]
    )
    return Figures(
        events_per_step=shape.per_step(shape.events),
        history_bytes_per_step=shape.per_step(shape.history_bytes),
        actions_per_step=shape.per_step(actions),
        tasks_per_step=shape.per_step(tasks),
        server_cpu_ms_per_step=statistics.median(result.server_cpu[WAYPOINT]),
        worker_cpu_ms_per_step=statistics.median(result.worker_cpu[WAYPOINT]),
        store_bytes_per_step=stored,
        source=f"measured: {reps} runs of {steps} steps on the dev server",
    )


def _n(value: float, digits: int = 0) -> str:
    return f"{value:,.{digits}f}"


def _bytes(value: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(value) < 1000 or unit == "TB":
            return f"{value:,.1f} {unit}"
        value /= 1000
    raise AssertionError("unreachable")


def plan(f: Figures, load: Load) -> str:
    """The plan as markdown: inputs, then each result with the arithmetic that gives it."""
    steps_day = load.runs_per_day * load.steps_per_run
    mean_sps = steps_day / DAY
    peak_sps = mean_sps * load.peak_factor
    hist_day = steps_day * f.history_bytes_per_step
    # A parked run is open: its history so far (assumed half its steps) is kept until it ends.
    parked_hist = load.parked_runs * load.steps_per_run / 2 * f.history_bytes_per_step
    server = peak_sps * f.server_cpu_ms_per_step / 1000 / load.utilisation
    worker = peak_sps * f.worker_cpu_ms_per_step / 1000 / load.utilisation
    workers = max(1, math.ceil(worker))
    cached = min(load.parked_runs, load.workers_cache * workers)
    store_day = steps_day * f.store_bytes_per_step
    aps = peak_sps * f.actions_per_step
    tqps = peak_sps * f.tasks_per_step
    ns_steps = CLOUD_NAMESPACE_APS / f.actions_per_step
    tq_steps = TASK_QUEUE_TASKS_PER_S / f.tasks_per_step
    rows = [
        ["steps per day", f"{_n(load.runs_per_day)} runs x {_n(load.steps_per_run)} steps",
         _n(steps_day)],
        ["steps per second, mean / peak",
         f"{_n(steps_day)} / {DAY:,} s; x {load.peak_factor} peak",
         f"{_n(mean_sps, 2)} / {_n(peak_sps, 2)}"],
        ["history events per day", f"{_n(steps_day)} x {_n(f.events_per_step, 2)}",
         _n(steps_day * f.events_per_step)],
        ["history written per day", f"{_n(steps_day)} x {_n(f.history_bytes_per_step)} B",
         _bytes(hist_day)],
        ["history kept (closed runs)", f"{_bytes(hist_day)} x {_n(load.retention_days)} days",
         _bytes(hist_day * load.retention_days)],
        ["history kept (parked runs)",
         f"{_n(load.parked_runs)} x {_n(load.steps_per_run / 2)} steps x "
         f"{_n(f.history_bytes_per_step)} B", _bytes(parked_hist)],
        ["Temporal server cores",
         f"{_n(peak_sps, 2)} x {_n(f.server_cpu_ms_per_step, 2)} ms / {load.utilisation}",
         _n(server, 2)],
        ["worker cores (Waypoint only)",
         f"{_n(peak_sps, 2)} x {_n(f.worker_cpu_ms_per_step, 2)} ms / {load.utilisation}",
         f"{_n(worker, 2)} ({workers} worker{'s' * (workers > 1)})"],
        ["worker memory for cached parked runs",
         f"min({_n(load.parked_runs)}, {load.workers_cache} x {workers}) x {f.cached_run_mb} MB",
         f"{_n(cached * f.cached_run_mb)} MB"],
        ["object store written per day", f"{_n(steps_day)} x {_n(f.store_bytes_per_step)} B",
         _bytes(store_day)],
        ["actions per second at peak", f"{_n(peak_sps, 2)} x {_n(f.actions_per_step, 2)}",
         f"{_n(aps, 1)} of {CLOUD_NAMESPACE_APS} ({aps / CLOUD_NAMESPACE_APS:.0%})"],
        ["task-queue dispatches per second at peak",
         f"{_n(peak_sps, 2)} x {_n(f.tasks_per_step, 2)}",
         f"{_n(tqps, 1)} of {TASK_QUEUE_TASKS_PER_S} ({tqps / TASK_QUEUE_TASKS_PER_S:.0%})"],
        ["one namespace stops being enough at",
         f"{CLOUD_NAMESPACE_APS} APS / {_n(f.actions_per_step, 2)} actions per step",
         f"{_n(ns_steps)} steps/s peak = {_n(ns_steps * DAY / load.peak_factor)} steps/day"],
        ["one task queue stops being enough at",
         f"{TASK_QUEUE_TASKS_PER_S} tasks/s / {_n(f.tasks_per_step, 2)} tasks per step",
         f"{_n(tq_steps)} steps/s peak = {_n(tq_steps * DAY / load.peak_factor)} steps/day"],
    ]  # fmt: skip
    inputs = [
        [name.replace("_", " "), _n(value, 2) if isinstance(value, float) else value]
        for name, value in asdict(f).items()
    ]
    return "\n".join(
        [
            f"**Figures per step** ({f.source})",
            "",
            table(["figure", "value"], inputs),
            "",
            f"**Capacity plan**: {_n(load.runs_per_day)} runs/day x {_n(load.steps_per_run)} "
            f"steps, {_n(load.parked_runs)} parked, {_n(load.retention_days)} days' retention, "
            f"peak {load.peak_factor}x mean, cores sized for {load.utilisation:.0%} utilisation",
            "",
            table(["what", "arithmetic", "result"], rows),
        ]
    )


ASSUMPTIONS = f"""Assumptions:
- Namespace: Temporal Cloud's published default of {CLOUD_NAMESPACE_APS} actions/s and \
{CLOUD_NAMESPACE_RPS} requests/s per namespace (it rises with 7 days' usage, or with \
provisioned capacity). Self-hosted has no such quota: frontend rate limits and the database decide.
- Task queue: {TASK_QUEUE_TASKS_PER_S} tasks/s for one task queue with its default 4 partitions \
is our assumption, not a published figure; more partitions \
(matching.numTaskqueueReadPartitions/WritePartitions) or more queues raise it.
- Server CPU is the dev server's, SQLite in-process: a lower bound for a cluster, whose database \
and network hops cost more. Worker CPU is Waypoint's own (scripted model, no-op tool): add your \
tools' and the model client's work. One Python worker process uses about one core at most, \
so workers = worker cores rounded up.
- Object-store bytes scale with what steps carry: the bench's steps are tiny; edit \
store_bytes_per_step in a figures file for real transcripts and tool outputs.
- A parked run holds no worker and no CPU; it keeps its open history (assumed half its steps) and, \
while cached, ~{Figures.__dataclass_fields__["cached_run_mb"].default} MB of worker memory."""


def main() -> None:
    """Parse the load, get the figures, print the plan."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--measure", action="store_true", help="measure on a dev server")
    source.add_argument("--figures", type=Path, help="JSON of figures (see --save)")
    parser.add_argument("--save", type=Path, help="write the measured figures here")
    parser.add_argument("--steps", type=int, default=100, help="steps per measured run")
    parser.add_argument("--reps", type=int, default=3, help="measured runs")
    parser.add_argument("--runs-per-day", type=float, default=100_000)
    parser.add_argument("--steps-per-run", type=float, default=40)
    parser.add_argument("--parked", type=float, default=10_000, help="runs parked at once")
    parser.add_argument("--retention-days", type=float, default=30)
    parser.add_argument("--peak-factor", type=float, default=3.0, help="peak rate / mean rate")
    parser.add_argument("--utilisation", type=float, default=0.5, help="target CPU utilisation")
    parser.add_argument("--cache", type=int, default=200, help="runs cached per worker")
    args = parser.parse_args()
    if args.measure:
        figures = asyncio.run(measure(args.steps, args.reps))
        if args.save:
            args.save.write_text(json.dumps(asdict(figures), indent=2) + "\n")
    else:
        figures = Figures(**json.loads(args.figures.read_text()))
    load = Load(
        args.runs_per_day,
        args.steps_per_run,
        args.parked,
        args.retention_days,
        args.peak_factor,
        args.utilisation,
        args.cache,
    )
    print(plan(figures, load) + "\n\n" + ASSUMPTIONS)


if __name__ == "__main__":
    main()
