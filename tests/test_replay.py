"""Golden histories replay against today's workflow code: a shape change cannot slip in unseen."""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from waypoint._workflows import AgentWorkflow

ROOT = Path(__file__).parent / "histories"
HISTORIES = sorted(ROOT.rglob("*.json"))  # a released version's are kept in a folder of its own


@pytest.mark.parametrize("path", HISTORIES, ids=[str(p.relative_to(ROOT)) for p in HISTORIES])
async def test_golden_history_replays(path: Path) -> None:
    replayer = Replayer(workflows=[AgentWorkflow], data_converter=pydantic_data_converter)
    history = WorkflowHistory.from_json(f"golden-{path.stem}", path.read_text())
    result = await replayer.replay_workflow(history, raise_on_replay_failure=True)
    assert result.replay_failure is None


def test_there_are_golden_histories() -> None:
    assert {p.stem for p in HISTORIES} >= {
        "approval",
        "reconcile",
        "parallel",
        "killed",
        "continued",
        "bounded_carry",
        "escalation",
        "thinking_stops",
        "typed_output",
        "streaming",
        "policy",
        "mcp",
        "client_answer",
        "subagent",
        "signed_decisions",
        "policy_coerced",
        "fork",
        "agent_queue",
        "cancelled_effect",
        "steered",
        "tool_changed",
        "replanned",
        "cancelled_model_step",
        "cancelled_subagent",
        "fresh_reads",
        "local_turn",
        "notices",
        "waiting_handover",
        "parked_handover",
    }


def test_the_first_release_records_no_patch_markers() -> None:
    """One baseline: until a release has recorded runs, no history carries a `patched()` marker.

    From the first release on, a change to workflow code is patched (docs/workflow-changes.md).
    """
    for path in HISTORIES:
        assert "core_patch" not in path.read_text(), path.name
