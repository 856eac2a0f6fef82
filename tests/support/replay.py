"""Replaying a finished run's history on today's workflow code, as a worker restarted would."""

from __future__ import annotations

from typing import Any

from temporalio.client import WorkflowHandle
from temporalio.converter import DataConverter
from temporalio.worker import Replayer

from waypoint._workflows import AgentWorkflow


async def assert_replays(handle: WorkflowHandle[Any, Any], converter: DataConverter) -> None:
    """The run's history replays with no failure, decoded by `converter` (the run's own)."""
    history = await handle.fetch_history()
    replayer = Replayer(workflows=[AgentWorkflow], data_converter=converter)
    replayed = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert replayed.replay_failure is None, replayed.replay_failure
