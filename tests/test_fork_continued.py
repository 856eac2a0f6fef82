"""Fork and correct find a turn by scanning the transcript: a continued answer adds messages."""

from __future__ import annotations

import pytest
from temporalio.client import WorkflowFailureError
from temporalio.exceptions import ActivityError, ApplicationError

from waypoint._torture.invariants import failure_of, fork_raced_compaction
from waypoint._workflows.operator import correct, fork_state
from waypoint.protocol import (
    AgentState,
    Correction,
    Message,
    RunInput,
    StepRecord,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)


def _call(turn: int) -> ToolUseBlock:
    return ToolUseBlock(id=f"call{turn}", name="lookup", input={"turn": turn})


def _result(turn: int) -> Message:
    content = [ToolResultBlock(tool_use_id=f"call{turn}", content=f"result {turn}")]
    return Message(role="user", content=content)  # type: ignore[arg-type]


def _step(step_id: str, kind: str = "tool") -> StepRecord:
    return StepRecord(step_id=step_id, kind=kind, input_hash="h", status="completed")  # type: ignore[arg-type]


def _state() -> AgentState:
    """Turn 1 paused and continued (two assistant messages in a row), then two plain turns."""
    messages = [
        Message(role="user", content=[TextBlock(text="task")]),
        Message(role="assistant", content=[TextBlock(text="Searching...")]),
        Message(role="assistant", content=[_call(1)]),
        _result(1),
        Message(role="assistant", content=[_call(2)]),
        _result(2),
        Message(role="assistant", content=[TextBlock(text="done")]),
    ]
    ledger = [
        _step("t1.model", "model"),
        _step("t1.model.cont1", "model"),
        _step("t1.tool.1.lookup"),
        _step("t2.model", "model"),
        _step("t2.tool.1.lookup"),
        _step("t3.model", "model"),
    ]
    return AgentState(
        input=RunInput(agent="a", task="task"), messages=messages, ledger=ledger, turn=3
    )


def test_fork_after_a_continued_turn_keeps_that_turns_tool_results() -> None:
    fork = fork_state(_state(), after_turn=1)
    assert [m.role for m in fork.messages] == ["user", "assistant", "assistant", "user"]
    assert fork.messages[-1] == _result(1)
    assert {r.step_id for r in fork.ledger} == {"t1.model", "t1.model.cont1", "t1.tool.1.lookup"}


def test_fork_after_a_later_turn_counts_the_continued_turn_once() -> None:
    fork = fork_state(_state(), after_turn=2)
    assert fork.messages[-1] == _result(2)
    assert len(fork.messages) == 6


def test_correct_replaces_the_result_of_the_right_turn_after_a_continuation() -> None:
    s = _state()
    why = correct(s, Correction(step_id="t2.tool.1.lookup", result="fixed", reviewer="ops"))
    assert why == ""
    assert s.messages[5].content[0].content == "fixed"  # type: ignore[union-attr]
    assert s.messages[3] == _result(1)


def test_a_fork_whose_turn_was_compacted_meanwhile_is_the_one_failure_torture_excuses() -> None:
    """Torture seed 576: the source compacted turns 1-2 after `fork` checked, before the fork
    loaded them; the fork failed with `CannotFork`, having run nothing (documented)."""
    s = _state().model_copy(update={"compacted_turns": 2})
    with pytest.raises(ValueError) as refused:
        fork_state(s, after_turn=2)
    failure = f"CannotFork: cannot fork 'r' after turn 2: {refused.value}"
    assert fork_raced_compaction("r-fork2-3811ce", failure)
    assert not fork_raced_compaction("r", failure)  # the scenario's own run, not a fork
    assert not fork_raced_compaction("other-fork2-3811ce", failure)  # another source named
    assert not fork_raced_compaction("r-fork1-3811ce", failure)  # asked for another turn
    late = f"CannotFork: cannot fork 'r' after turn 3: {refused.value}"
    assert not fork_raced_compaction("r-fork3-3811ce", late)  # turn 3 was not compacted
    gone = "CannotFork: cannot fork 'r': no such run in this namespace"
    assert not fork_raced_compaction("r-fork2-3811ce", gone)
    assert not fork_raced_compaction("r-fork2-3811ce", f"ToolFailed: {refused.value}")


class _ForkThatFailed:
    """A fork's handle as seed 576 left it: its `load_fork` activity failed with `CannotFork`."""

    def __init__(self, message: str) -> None:
        self.message = message

    async def result(self) -> None:
        failed = ActivityError(
            "Activity task failed",
            scheduled_event_id=5,
            started_event_id=6,
            identity="worker",
            activity_type="waypoint.load_fork",
            activity_id="1",
            retry_state=None,
        )
        failed.__cause__ = ApplicationError(self.message, type="CannotFork", non_retryable=True)
        raise WorkflowFailureError(cause=failed)


async def test_the_failure_of_a_fork_is_named_by_the_error_its_activity_raised() -> None:
    """The soak printed `ActivityError: Activity task failed`; the cause is what matters."""
    message = "cannot fork 'r' after turn 2: turns 1-2 were compacted into a summary; fork..."
    failure = await failure_of(_ForkThatFailed(message))  # type: ignore[arg-type]
    assert failure == f"CannotFork: {message}" and fork_raced_compaction("r-fork2-abcdef", failure)
