"""Medians, ranges and markdown tables for the benchmark report."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Spread:
    """The median and range of repeated measurements."""

    median: float
    low: float
    high: float
    n: int

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread:
        """Summarise repeated measurements (at least one)."""
        return cls(statistics.median(values), min(values), max(values), len(values))

    def show(self, fmt: str = "{:.1f}") -> str:
        """`median (min-max)`, or the one value when there is only one."""
        if self.n == 1:
            return fmt.format(self.median)
        return f"{fmt.format(self.median)} ({fmt.format(self.low)}-{fmt.format(self.high)})"


def ratio(a: Sequence[float], b: Sequence[float]) -> Spread:
    """The ratio of paired measurements a[i] / b[i] (interleaved runs pair naturally)."""
    return Spread.of([x / y for x, y in zip(a, b, strict=False) if y])


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A markdown table."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)
