"""What `waypoint killtest --example procurement` runs: TASK, answered with ANSWER, approved.

The supplier check runs as a child workflow on the same worker; a worker cache lets status
queries on the parent leave the waiting child alone (see `waypoint.testing.run_kill_test`).
"""

from __future__ import annotations

from pathlib import Path

from examples.procurement.agent import ANSWER, NAME, TASK
from examples.procurement.downstream import count_effects
from waypoint.testing import KillTestExample


def example(folder: Path) -> KillTestExample:
    """The buyer over a catalogue, orders and check log in `folder`."""
    return KillTestExample(
        app="examples.procurement:agents",
        agent=NAME,
        task=TASK,
        count_effects=lambda key: count_effects(folder, key),
        env={"WAYPOINT_PROCUREMENT_DIR": str(folder), "WAYPOINT_MAX_CACHED_WORKFLOWS": "10"},
        answers={"ask_requester": ANSWER},
    )
