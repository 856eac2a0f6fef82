"""Run every benchmark against a dev server of its own and print markdown tables.

    python bench/run.py [--quick] [--check] [--with-history]
                        [--only per-step,resume,parked,throughput,durability,config,console-inbox]

Per-step overhead (Waypoint, raw Temporal, SQLite floor, LangGraph, `pure` tools), where that
time goes, resume latency, parked runs, throughput, the durability dial (`step` against `turn` on a
read-heavy agent, beside raw Temporal), the dev server's dynamic config against Temporal's
defaults, and the console's inbox over 10,000 waiting runs (on a server of its own).
Medians and (min-max) over repeated, interleaved runs. `--quick` shrinks everything to about
two minutes; `--with-history` adds bench/history_growth.py (about 90 s).
`--check` exits 1 when a target is missed by more than the run's own min-max spread: run it
on a quiet machine before merging a change to the loop, the worker or the payload path.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import temporalio  # noqa: E402

from bench import anatomy, server_config, targets  # noqa: E402
from bench.console_inbox import console_inbox  # noqa: E402
from bench.durability import durability  # noqa: E402
from bench.harness import env  # noqa: E402
from bench.parked import parked  # noqa: E402
from bench.per_step import per_step  # noqa: E402
from bench.resume import resume  # noqa: E402
from bench.throughput import throughput  # noqa: E402
from waypoint._operations.dev_server import DYNAMIC_CONFIG, temporal_binary  # noqa: E402

SECTIONS = ("per-step", "resume", "parked", "throughput", "durability", "config", "console-inbox")


@dataclass(frozen=True)
class Plan:
    """How big each benchmark is."""

    steps: int
    step_reps: int
    resume_sizes: tuple[int, ...]
    resume_reps: int
    parked_runs: int
    concurrent_runs: int
    run_steps: int
    throughput_reps: int
    config_reps: int
    inbox_runs: int
    inbox_reps: int
    dial_runs: int
    dial_turns: int
    dial_reps: int


FULL = Plan(200, 5, (10, 100, 1000), 3, 1000, 20, 50, 3, 3, 10000, 10, 20, 10, 3)
QUICK = Plan(50, 3, (10, 100), 1, 100, 5, 20, 2, 2, 200, 5, 5, 5, 2)


def emit(text: str) -> None:
    """Print a section and flush, so a long run shows progress."""
    print(text + "\n", flush=True)


def header(plan: Plan, quick: bool) -> str:
    """What ran where."""
    tuning = ", ".join(f"{k}={v}" for k, v in DYNAMIC_CONFIG.items())
    return (
        f"# Waypoint benchmarks{' (quick)' if quick else ''}\n\n"
        f"{os.cpu_count()} cores, Python {platform.python_version()}, temporalio "
        f"{temporalio.__version__}, `{temporal_binary().name}` dev server (SQLite) with {tuning}; "
        "scripted model with zero latency, no-op tool."
    )


async def main(plan: Plan, quick: bool, sections: set[str], with_history: bool) -> bool:
    """Run the selected benchmarks one after another; False if a target regressed."""
    started = time.monotonic()
    emit(header(plan, quick))
    step = resumed = parked_runs = speed = shapes = inbox = dial = None
    with tempfile.TemporaryDirectory(prefix="waypoint-bench-") as tmp:
        work = Path(tmp)
        async with env(work / "tuned") as bench:
            if "per-step" in sections:
                step = await per_step(bench, plan.steps, plan.step_reps)
                emit(step.report())
                events = await anatomy.histories(bench, step)
                shapes = anatomy.shapes_of(events, step)
                emit(anatomy.where_time_goes(events, step))
            if "resume" in sections:
                resumed = await resume(bench, list(plan.resume_sizes), plan.resume_reps)
                emit(resumed.report())
            if "parked" in sections:
                parked_runs = await parked(bench, plan.parked_runs)
                emit(parked_runs.report())
            if "throughput" in sections:
                speed = await throughput(
                    bench, plan.concurrent_runs, plan.run_steps, plan.throughput_reps
                )
                emit(speed.report())
            if "durability" in sections:
                dial = await durability(bench, plan.dial_runs, plan.dial_turns, plan.dial_reps)
                emit(dial.report())
        if "config" in sections and step is not None and not quick:
            default = await server_config.default_config(
                work / "default", plan.steps, plan.config_reps
            )
            emit(server_config.report(step, default))
        if "console-inbox" in sections:  # its own server: the parked runs above are not listed
            async with env(work / "console") as own:
                inbox = await console_inbox(own, plan.inbox_runs, plan.inbox_reps)
            emit(inbox.report())
    found = targets.collect(step, shapes, resumed, parked_runs, speed, inbox, dial)
    if found:
        emit(targets.report(found))
    emit(f"_{time.monotonic() - started:.0f} s in all._")
    if with_history:
        from bench import history_growth

        await history_growth.main(1000, 5)
    late = targets.regressions(found)
    if late:
        names = "; ".join(t.name for t in late)
        emit(f"Past their targets by more than this run's spread: {names}")
    return not late


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="small sizes, about two minutes")
    parser.add_argument("--with-history", action="store_true", help="add the history-growth run")
    parser.add_argument("--only", default=",".join(SECTIONS), help="comma-separated sections")
    parser.add_argument(
        "--check", action="store_true", help="exit 1 when a target is missed beyond the spread"
    )
    args = parser.parse_args()
    chosen = set(args.only.split(","))
    unknown = chosen - set(SECTIONS)
    if unknown:
        parser.error(
            f"unknown sections {', '.join(sorted(unknown))}; choose from {', '.join(SECTIONS)}"
        )
    held = asyncio.run(main(QUICK if args.quick else FULL, args.quick, chosen, args.with_history))
    sys.exit(0 if held or not args.check else 1)
