"""Driving a run to a kill point: approve and answer on the way, stop once it cannot go on.

A harness that waits on a run which ended, parked, or waits for an answer the harness was never
given, would wait its whole timeout and say nothing useful; `drive` says at once what the run
is doing and why the point will not come.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from temporalio.client import Client

from waypoint.client import runs, views
from waypoint.errors import WaypointError
from waypoint.protocol import ApprovalDecision, ClientAnswer, PendingApproval, RunStatus
from waypoint.protocol.states import FINAL_STATES, STUCK_STATES

CHECK_EVERY = 0.5
"""Seconds between looks at the server when no worker answers (has the run closed?)."""
POINT_EVERY = 0.02
"""Seconds between checks of the kill point: a kill lands this soon after its moment."""
STATUS_EVERY = 0.1
"""Seconds between status queries. Each is a round trip through the worker, so asking at the
point's pace spent most of a kill test's server and worker CPU; what the status shows (an
approval to send, a park, the end) waits this long at most."""


Approvals = Literal["approve", "reject"] | Callable[[PendingApproval], bool]
"""How the harness decides an approval: always approve, always reject, or a function of the
pending call (its `tool` and `arguments`) that returns True to approve."""
REJECTED = "rejected by the kill test's approval rule"


class KillTestError(WaypointError):
    """The harness cannot go on: the run ended, parked, or waits for what it was not given."""


def check_rule(rule: object) -> None:
    """Refuse an approval rule that is none of the three, before any run starts."""
    if not (callable(rule) or rule in ("approve", "reject")):
        raise KillTestError(
            f"approvals={rule!r}: give 'approve', 'reject' or a function of the pending call"
        )


@dataclass
class Waiting:
    """Approvals and questions seen pending and not yet sent; answers by tool name."""

    answers: Mapping[str, dict[str, Any]]
    rule: Approvals = "approve"
    approvals: dict[str, tuple[str, bool]] = field(default_factory=dict)
    """Step id: the arguments hash reviewed and whether the rule approves (decided once)."""
    questions: dict[str, str] = field(default_factory=dict)
    answered: set[str] = field(default_factory=set)

    def note(self, status: RunStatus) -> None:
        """Remember what `status` shows waiting that the harness can send."""
        for p in status.pending_approvals:
            if p.step_id not in self.approvals:  # a rule that raises fails the test, here
                yes = self.rule == "approve" or (callable(self.rule) and bool(self.rule(p)))
                self.approvals[p.step_id] = (p.arguments_hash, yes)
        for q in status.pending_questions:
            if q.tool in self.answers and q.step_id not in self.answered:
                self.questions.setdefault(q.step_id, q.tool)

    async def send(
        self, client: Client, run: str, approve: bool = True, answer: bool = True
    ) -> None:
        """Decide and answer by raw signal, so it works with no worker up; each answer once."""
        handle = runs.handle(client, run)
        for step_id, (args_hash, yes) in list(self.approvals.items()) if approve else []:
            decision = ApprovalDecision(
                step_id=step_id,
                reviewer="kill-test",
                arguments_hash=args_hash,
                reason="" if yes else REJECTED,
            )
            await handle.signal("approve" if yes else "reject", decision)
            del self.approvals[step_id]
        for step_id in list(self.questions) if answer else []:
            tool = self.questions.pop(step_id)
            given = ClientAnswer(
                step_id=step_id, result=dict(self.answers[tool]), sender="kill-test"
            )
            await handle.signal("answer", given)
            self.answered.add(step_id)


def blocked(status: RunStatus, answers: Mapping[str, Any]) -> str:
    """Why the run cannot move on by itself or the harness's hand; '' while it can."""
    if status.state in STUCK_STATES:
        return _state_line(status, "it is parked in")
    for q in status.pending_questions:
        if q.tool not in answers:
            shape = f", shaped {json.dumps(q.answer_schema)}" if q.answer_schema else ""
            return (
                f"it waits for an answer to {q.tool} (step {q.step_id}) and the harness was "
                f"given none: pass answers={{{q.tool!r}: {{...}}}}, or --answer "
                f"{q.tool}='{{...}}' on the command line{shape}"
            )
    return ""


async def drive(
    client: Client,
    run: str,
    goal: str,
    until: Callable[[], Awaitable[bool]],
    waiting: Waiting,
    timeout: float,
    approve: bool = True,
    answer: bool = True,
    ends_it: bool = False,
) -> bool:
    """Poll until `until()`; approve and answer on the way unless told to hold them back.

    The point is checked between reading what waits and answering it: a run that raced past
    its kill point to a gate is killed there, not approved past the next point first. Returns
    False when the run ended first and `ends_it` says that is as good as the point (the run's
    end, or a moment in time, which comes anyway); raises `KillTestError` naming `goal` when
    the run ended, parked or waits for an answer it was not given, or the time ran out.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    last: RunStatus | None = None
    looked, asked = 0.0, -STATUS_EVERY  # the first pass asks at once
    while True:
        if loop.time() - asked < STATUS_EVERY:
            if await until():
                break
            await asyncio.sleep(POINT_EVERY)
            continue
        asked, status = loop.time(), None
        with contextlib.suppress(Exception):  # a worker between lives cannot answer queries
            status = await runs.status(client, run, timeout=2)
        if status is not None:
            last = status
            waiting.note(status)
        if await until():
            break
        why, ended = blocked(status, waiting.answers) if status else "", False
        if status is not None and status.state in FINAL_STATES:
            why, ended = _state_line(status), True
        elif status is None and loop.time() - looked > CHECK_EVERY:
            looked = loop.time()
            why = await _closed(client, run)
            ended = bool(why)
        if ended and ends_it:
            return False
        if why:
            raise KillTestError(f"run {run} cannot reach {goal}: {why}")
        with contextlib.suppress(Exception):
            await waiting.send(client, run, approve, answer)
        if loop.time() > deadline:
            state = f"; it is {last.state} at turn {last.turn}" if last else ""
            raise KillTestError(f"run {run} did not reach {goal} in {timeout:g}s{state}")
        await asyncio.sleep(POINT_EVERY)
    with contextlib.suppress(Exception):  # what waits at the kill point, to send after it
        waiting.note(await runs.status(client, run, timeout=2))
    return True


def _state_line(status: RunStatus, said: str = "it is") -> str:
    return f"{said} {status.state}" + (f": {status.detail}" if status.detail else "")


async def _closed(client: Client, run: str) -> str:
    """'it ended EXECUTION (why)' when Temporal has closed the run; '' while it is open."""
    with contextlib.suppress(Exception):
        view = await views.view(client, run, ask_worker=False)
        if view.closed:
            return f"it ended {view.execution}" + (f" ({view.reason})" if view.reason else "")
    return ""
