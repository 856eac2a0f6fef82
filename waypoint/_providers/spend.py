"""What a model call has spent so far, so a call the run cancels (a steer) can say what it cost.

The model activity opens a `tally()` around the provider's call; providers `report` the usage
they know as it becomes known and never know where it goes. Claude reports its input tokens
when the reply starts and its output tokens only when it ends, so a call cut short mid-reply is
reported as partly known, never guessed. A no-op outside a tally.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field

from waypoint.protocol import PartialSpend, Usage


@dataclass
class Tally:
    """The latest usage a provider reported for the call in progress."""

    usage: Usage = field(default_factory=Usage)
    cost_usd: float | None = None
    known: bool = False
    on_report: Callable[[Tally], None] | None = None
    """Told after each report (the attempt journal keeps it, for a retry after a crash)."""

    def spend(self, attempt: int) -> PartialSpend:
        """What the activity reports when its call is cancelled."""
        return PartialSpend(
            usage=self.usage,
            cost_usd=self.cost_usd if self.known else None,
            known=self.known,
            attempt=attempt,
        )


_tally: ContextVar[Tally | None] = ContextVar("waypoint_spend_tally", default=None)


@contextlib.contextmanager
def tally(on_report: Callable[[Tally], None] | None = None) -> Iterator[Tally]:
    """Collect what the provider reports while the body runs."""
    current = Tally(on_report=on_report)
    token = _tally.set(current)
    try:
        yield current
    finally:
        _tally.reset(token)


def report(usage: Usage, *, known: bool, cost_usd: float | None = None) -> None:
    """Say what the call has spent so far; `known`: that is all of it, were it stopped now."""
    current = _tally.get()
    if current is not None:
        current.usage, current.known, current.cost_usd = usage, known, cost_usd
        if current.on_report is not None:
            current.on_report(current)


def plus(answer: Usage, earlier: Usage) -> Usage:
    """Two usages added up: an answer's and what the attempts before it spent."""
    return Usage(
        **{name: getattr(answer, name) + getattr(earlier, name) for name in Usage.model_fields}
    )
