"""The performance targets, checked against this run's measurements.

Each target compares a median with its limit. `--check` fails a target only when it is past
its limit by more than the run's own min-max spread: a quiet machine's noise is not a
regression, a change that moves the median beyond the noise is.
"""

from __future__ import annotations

from dataclasses import dataclass

from bench.console_inbox import TARGET_MS, Inbox
from bench.durability import CALLS, TARGET, Dial
from bench.history import Anatomy
from bench.parked import Parked
from bench.per_step import PURE_MANY, RAW, WAYPOINT, PerStep
from bench.resume import Resume
from bench.stats import Spread, ratio, table
from bench.throughput import Throughput


@dataclass(frozen=True)
class Target:
    """One target: what was measured, the limit, and which side of it is good."""

    name: str
    measured: Spread
    limit: float
    shown: str
    at_least: bool = False
    """The limit is a floor (throughput), not a ceiling."""

    @property
    def met(self) -> bool:
        """The median is on the right side of the limit."""
        m = self.measured.median
        return m >= self.limit if self.at_least else m <= self.limit

    @property
    def regressed(self) -> bool:
        """Past the limit by more than the measurement's own spread."""
        spread = self.measured.high - self.measured.low
        m = self.measured.median
        return m < self.limit - spread if self.at_least else m > self.limit + spread

    def status(self) -> str:
        """`met`, or by how much it was missed and whether that is beyond the noise."""
        if self.met:
            return "met"
        off = abs(self.measured.median / self.limit - 1) if self.limit else float("inf")
        return f"missed by {off:.0%}" + ("" if self.regressed else " (within the spread)")


def _paired(a: list[float], b: list[float]) -> Spread:
    return Spread.of([x - y for x, y in zip(a, b, strict=False)])


def collect(
    step: PerStep | None,
    shapes: dict[str, Anatomy] | None,
    resume: Resume | None,
    parked: Parked | None,
    speed: Throughput | None,
    inbox: Inbox | None = None,
    dial: Dial | None = None,
) -> list[Target]:
    """The targets this run measured (a section not run yields none)."""
    found: list[Target] = []
    if step is not None:
        per = ratio(step.ms[WAYPOINT], step.ms[RAW])
        shown = per.show("{:.2f}x")
        found.append(Target("per step <= 1.05x raw Temporal", per, 1.05, shown))
        ms = Spread.of(step.ms[WAYPOINT])
        found.append(Target("per step on the embedded server <= 30 ms", ms, 30, f"{ms.show()} ms"))
        cpu = _paired(step.worker_cpu[WAYPOINT], step.worker_cpu[RAW])
        found.append(
            Target(
                "worker CPU per step <= raw Temporal's + 1 ms",
                cpu,
                1.0,
                cpu.show("+{:.2f} ms"),
            )
        )
    if step is not None and PURE_MANY in step.ms:
        marginal = step.pure_marginal()
        shown = f"{marginal.show()} ms"
        found.append(Target("one more `pure` call in a turn <= 6 ms", marginal, 6, shown))
    if shapes is not None and WAYPOINT in shapes and RAW in shapes:
        a, b = shapes[WAYPOINT], shapes[RAW]
        grown = a.per_step(a.history_bytes) / b.per_step(b.history_bytes)
        found.append(
            Target(
                "history bytes per step <= raw's + 10%",
                Spread.of([grown]),
                1.10,
                f"{a.per_step(a.history_bytes):,.0f} vs {b.per_step(b.history_bytes):,.0f} "
                f"(+{grown - 1:.0%})",
            )
        )
    if speed is not None:
        r = ratio(speed.waypoint, speed.raw)
        found.append(
            Target(
                f"throughput ({speed.runs} x {speed.steps}) >= 1.0x raw Temporal",
                r,
                1.0,
                r.show("{:.2f}x"),
                at_least=True,
            )
        )
    if dial is not None:
        r = dial.speedup()
        found.append(
            Target(
                f'durability "turn" throughput ({dial.runs} x {dial.steps}, {dial.turns} turns '
                f'of {CALLS} reads) >= {TARGET}x "step"',
                r,
                TARGET,
                r.show("{:.2f}x"),
                at_least=True,
            )
        )
    if resume is not None and resume.killed:
        largest = max(resume.killed)
        kill = Spread.of(resume.killed[largest])
        found.append(
            Target(
                f"resume after SIGKILL, nothing in flight ({largest:,} steps) <= 1.5 s",
                kill,
                1500,
                kill.show("{:,.0f} ms"),
            )
        )
    if parked is not None:
        for row in parked.rows:
            per_1000 = row.added_mb * 1000 / row.runs
            found.append(
                Target(
                    f"1,000 parked runs add < 100 MB (worker cache: {row.cache})",
                    Spread.of([per_1000]),
                    100,
                    f"{per_1000:.0f} MB per 1,000",
                )
            )
    if inbox is not None:
        listed = Spread.of(inbox.api_ms)
        found.append(
            Target(
                f"first page of {inbox.runs:,} waiting runs from the console API <= 300 ms",
                listed,
                TARGET_MS,
                listed.show("{:,.0f} ms"),
            )
        )
    return found


def report(found: list[Target]) -> str:
    """One row per target: the measured median (and range) and whether it is met."""
    rows = [[t.name, t.shown, t.status()] for t in found]
    return "\n".join(["**Targets**", "", table(["target", "measured", "status"], rows)])


def regressions(found: list[Target]) -> list[Target]:
    """The targets past their limit by more than the run's own spread."""
    return [t for t in found if t.regressed]
