"""A `resume` and a park in one workflow task agree in either order, whatever else waits (29).

Replay applies a task's signals before its activity results; a live worker may apply the
failed step (and park it) first. These play both orders through `Gates` itself, with one
workflow time, and compare who woke: a parallel call parking beside one already parked, or
beside one awaiting approval, must wake the same way (found in review after seed 6127).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from unittest import mock

import pytest

from waypoint._workflows.gates import Gates
from waypoint.protocol import PendingApproval, ResumeRequest, RunInput
from waypoint.protocol.run import AgentState

NOW = datetime(2026, 12, 1, tzinfo=UTC)


def park(gates: Gates, step: str) -> Callable[[], bool]:
    """What `Gates.tool_changed` does before it waits; returns whether the park has woken."""
    s = gates.s
    s.tool_changed[step] = f"step {step}: changed"
    gates.settle()
    seen = s.resumes
    gates.parked()
    return lambda: s.resumes > seen


def play(before: str, order: list[str]) -> tuple[dict[str, bool], list[str]]:
    with mock.patch("temporalio.workflow.now", return_value=NOW):
        s = AgentState(input=RunInput(agent="a", task="t"))
        gates = Gates(s, lambda: None)
        s.state = "running"
        parks: dict[str, Callable[[], bool]] = {}
        if before == "tool_changed":
            parks["A"] = park(gates, "A")
        elif before == "awaiting_approval":
            s.pending["A"] = PendingApproval(
                step_id="A", tool="pay", arguments={}, arguments_hash="h", requested_at="t"
            )
            gates.settle()
        for event in order:
            if event == "resume":
                gates.resume(ResumeRequest(reviewer="ops"))
            else:
                parks["B"] = park(gates, "B")
        woke = {step: woken() for step, woken in parks.items()}
    return woke, [i.reason for i in s.ignored_signals]


@pytest.mark.parametrize("before", ["running", "tool_changed", "awaiting_approval"])
def test_a_resume_and_a_park_in_one_task_agree_in_either_order(before: str) -> None:
    live = play(before, ["park", "resume"])
    replay = play(before, ["resume", "park"])
    assert live == replay
    assert all(live[0].values()) and live[1] == []  # every park woke, nothing refused


def test_a_resume_that_woke_nothing_is_refused_once_its_task_ends() -> None:
    with mock.patch("temporalio.workflow.now", return_value=NOW):
        s = AgentState(input=RunInput(agent="a", task="t"))
        gates = Gates(s, lambda: None)
        s.state = "running"
        s.pending["A"] = PendingApproval(
            step_id="A", tool="pay", arguments={}, arguments_hash="h", requested_at="t"
        )
        gates.settle()
        gates.resume(ResumeRequest(reviewer="ops"))
        assert s.ignored_signals == []  # its task has not ended
    later = datetime(2026, 12, 2, tzinfo=UTC)
    with (
        mock.patch("temporalio.workflow.now", return_value=later),
        mock.patch("temporalio.workflow.logger"),  # `ignore` logs through the workflow's
    ):
        gates.settle()
    assert [i.reason for i in s.ignored_signals] == [
        "nothing to resume: the run was awaiting_approval"
    ]
