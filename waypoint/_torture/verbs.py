"""Each simple verb's torture in one place: its scenario draw, its driver, its invariant.

A `Verb.simple` verb (`waypoint.protocol.verbs`) is exercised by the scenario event of its
`Verb.torture`. Its entry in `TORTURE` says how often `generate` draws that event, what the
driver does when it fires, and which invariant judges every run afterwards; the generator
(`scenario`), the driver (`runner`) and the judge (`invariants`) read this table and name no
verb, so a new simple verb's torture is one entry here.
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

from waypoint.protocol.verbs import PAUSE, UNPAUSE

if TYPE_CHECKING:
    from waypoint._torture.evidence import Execution
    from waypoint.protocol import RunResult

PAUSED_SECONDS = 1.5
"""How long a `pause` action holds the run (the `paused_still` invariant judges the window)."""


class Sender(Protocol):
    """What a driver needs of `waypoint._torture.operators.Operators`."""

    follow_ups: dict[str, tuple[float, str]]
    """By run: a verb an earlier action left to send, and when (`time.monotonic`)."""

    async def send(self, run: str, verb: str) -> bool:
        """Send a simple verb; False, noted, when the run refused it."""
        ...


Judge = Callable[["Mapping[str, RunResult]", "list[Execution]"], list[str]]
"""An invariant over the runs' results and histories: each violation as `name: what`."""


@dataclass(frozen=True)
class TortureVerb:
    """A simple verb's scenario event, how it is drawn and driven, and what must then hold."""

    event: str
    """Its `Verb.torture`: `action:<kind>`, the `Action.kind` the driver fires."""
    drive: Callable[[Sender, str], Awaitable[None]]
    share: float = 0.0
    """Of the scenarios, those that draw it: in table order, after every other event but the
    notices (drawn after pause's since seeds had them, so a new verb moves only that draw);
    0: drawn elsewhere (cancel is one of `scenario.ACTIONS`)."""
    invariant: str = ""
    judge: Judge | None = None

    @property
    def kind(self) -> str:
        """The scenario `Action.kind` that fires it."""
        return self.event.removeprefix("action:")


async def pause(operators: Sender, run: str) -> None:
    """Pause the run for `PAUSED_SECONDS`: approvals are decided meanwhile, no step runs."""
    if await operators.send(run, PAUSE):
        operators.follow_ups[run] = (time.monotonic() + PAUSED_SECONDS, UNPAUSE)


async def cancel(operators: Sender, run: str) -> None:
    """Cancel the run (Temporal's cancel; signed in a signed scenario)."""
    await operators.send(run, "cancel")


def paused_still(results: Mapping[str, RunResult], executions: list[Execution]) -> list[str]:
    """`paused_still`: a run paused (its `pause` line) scheduled no step until its `unpause`.

    No model or tool step was scheduled between the ledger lines of a `pause` and the `unpause`
    after it, by the server's clock.
    """
    found: list[str] = []
    for run, result in results.items():
        held: list[float] = []
        for r in result.ledger:
            if r.kind == "operator" and r.tool in (PAUSE, UNPAUSE) and r.decided_at:
                if (r.tool == PAUSE) == (len(held) % 2 == 0):
                    held.append(datetime.fromisoformat(r.decided_at).timestamp())
        held += [math.inf] * (len(held) % 2)
        windows = list(zip(held[::2], held[1::2], strict=True))
        for ex in (e for e in executions if e.workflow_id == run):
            for step_id, at in [
                *((s.step_id, s.scheduled) for s in ex.sent),
                *((s.step_id, s.scheduled) for s in ex.tools),
            ]:
                if any(start < at < end for start, end in windows):
                    found.append(f"paused_still: {run} scheduled {step_id} while paused")
    return found


TORTURE = (
    TortureVerb("action:pause", pause, share=0.12, invariant="paused_still", judge=paused_still),
    TortureVerb("action:cancel", cancel),
)
"""Every simple verb's torture, in the order drawn (a new one goes last: seeds keep theirs)."""
DRIVERS = {v.kind: v.drive for v in TORTURE}
"""By `Action.kind`: the driver of a simple verb's action."""
