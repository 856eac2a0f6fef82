"""The issue's targets, checked against this run's medians."""

from __future__ import annotations

import statistics

from bench.parked import Parked
from bench.per_step import PURE_MANY, RAW, WAYPOINT, PerStep
from bench.resume import Resume
from bench.stats import ratio, table


def _row(target: str, value: float, limit: float, shown: str) -> list[str]:
    return [target, shown, "met" if value <= limit else f"missed by {value / limit - 1:.0%}"]


def report(step: PerStep, resume: Resume | None, parked: Parked | None) -> str:
    """One row per target: the measured median and whether it is met."""
    a, b = statistics.median(step.ms[WAYPOINT]), ratio(step.ms[WAYPOINT], step.ms[RAW]).median
    rows = [
        _row("Waypoint per step <= 1.10x raw Temporal", b, 1.10, f"{b:.2f}x"),
        _row("per-step time on the embedded server <= 30 ms", a, 30, f"{a:.1f} ms"),
    ]
    if PURE_MANY in step.ms:
        marginal = step.pure_marginal().median
        rows.append(_row("`pure` tool step <= 6 ms (marginal)", marginal, 6, f"{marginal:.1f} ms"))
    if resume is not None and resume.stopped:
        largest = max(resume.stopped)
        stop = statistics.median(resume.stopped[largest])
        kill = statistics.median(resume.killed[largest])
        label = f"resume at {largest:,} steps < 1 s"
        rows.append(_row(f"{label} (after SIGTERM)", stop, 1000, f"{stop:,.0f} ms"))
        rows.append(
            _row(f"{label} (after SIGKILL, signalled at once)", kill, 1000, f"{kill:,.0f} ms")
        )
    if parked is not None:
        for row in parked.rows:
            per_1000 = row.added_mb * 1000 / row.runs
            label = f"1,000 parked runs add < 100 MB (cache {row.cache})"
            rows.append(_row(label, per_1000, 100, f"{per_1000:.0f} MB per 1,000"))
    return "\n".join(["**Targets**", "", table(["target", "measured (median)", "status"], rows)])
