"""Where a kill test stops the worker, and what `waypoint killtest --example` needs.

A point is reached after a step, at a file a tool writes, after seconds, or while the run
waits for a person.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from temporalio.client import Client

from waypoint.client import runs
from waypoint.testing.worker_process import completed_steps


@dataclass
class KillPoint:
    """When to SIGKILL the worker: after `arm()`, as soon as `reached(client, run)` is true."""

    label: str
    reached: Callable[[Client, str], Awaitable[bool]]
    arm: Callable[[], None] = lambda: None
    release: Callable[[], None] = lambda: None
    """Runs after the kill, before the next worker starts (e.g. lift a barrier)."""
    approve_on_the_way: bool = True
    """Approve pending approvals while waiting for this point (off to kill during the wait)."""
    answer_on_the_way: bool = True
    """Answer pending questions while waiting for this point (off to kill during the wait).

    What is held back is sent by signal after the kill, while no worker is up."""
    graceful: bool = False
    """SIGTERM instead of SIGKILL: a deploy's drain, which must end with exit code 0."""
    passes_at_end: bool = False
    """A moment that comes anyway: a run that ends first skips it (the report lists it), where
    a point the run can no longer reach (a step, a file, a wait) fails the test at once."""

    def gracefully(self) -> KillPoint:
        """The same moment, met with a SIGTERM (the worker drains and exits) instead."""
        return replace(self, label=f"SIGTERM {self.label}", graceful=True)

    @classmethod
    def after_step(cls, step_id: str) -> KillPoint:
        """Kill as soon as the history records the step's completion."""

        async def reached(client: Client, run: str) -> bool:
            return step_id in await completed_steps(client, run)

        return cls(f"after {step_id}", reached)

    @classmethod
    def at_file(cls, label: str, reached_file: Path, arm_file: Path | None = None) -> KillPoint:
        """Kill when a tool's test hook writes `reached_file` (after `arm_file` is created)."""

        async def reached(client: Client, run: str) -> bool:
            return reached_file.exists()

        def arm() -> None:
            if arm_file is not None:
                arm_file.parent.mkdir(parents=True, exist_ok=True)
                arm_file.touch()

        return cls(label, reached, arm)

    @classmethod
    def after_seconds(cls, seconds: float) -> KillPoint:
        """Kill at an arbitrary moment: `seconds` after the previous worker started."""
        start: list[float] = []

        async def reached(client: Client, run: str) -> bool:
            now = time.monotonic()
            if not start:
                start.append(now)
            return now - start[0] >= seconds

        return cls(f"after {seconds:.2f}s", reached, passes_at_end=True)

    @classmethod
    def awaiting_approval(cls) -> KillPoint:
        """Kill while the run waits for a person; the approval is then sent with no worker up."""

        async def reached(client: Client, run: str) -> bool:
            return (await runs.status(client, run)).state == "awaiting_approval"

        return cls("while awaiting approval", reached, approve_on_the_way=False)

    @classmethod
    def awaiting_answer(cls) -> KillPoint:
        """Kill while the run waits for a client's answer; it is then sent with no worker up."""

        async def reached(client: Client, run: str) -> bool:
            return (await runs.status(client, run)).state == "awaiting_answer"

        return cls("while awaiting an answer", reached, answer_on_the_way=False)


@dataclass(frozen=True)
class KillTestExample:
    """What `waypoint killtest --example NAME` needs: each example's `killtest.example(folder)`."""

    app: str
    """`module:attribute` of the agents, for `waypoint worker --app`."""
    agent: str
    task: str
    count_effects: Callable[[str], int]
    """How many times the example's downstream (under the folder) saw an effect key."""
    env: Mapping[str, str] = field(default_factory=dict)
    """The example's settings for its workers (where its downstream lives)."""
    answers: Mapping[str, dict[str, Any]] = field(default_factory=dict)
    """Results for its client-answered tools, by tool name."""
