"""What `waypoint killtest --example vendor_onboarding` runs: the demo over a fresh folder."""

from __future__ import annotations

from pathlib import Path

from waypoint.demo.agent import DEMO_TASK, demo_dir_from_env
from waypoint.demo.downstream import count_emails, count_vendors
from waypoint.testing import KillTestExample


def example(folder: Path) -> KillTestExample:
    """The demo, its vendor registry and outbox in `folder`."""
    return KillTestExample(
        app="waypoint.demo:agents",
        agent="vendor_onboarding",
        task=DEMO_TASK,
        count_effects=lambda key: count_vendors(folder, key) + count_emails(folder, key),
        env={"WAYPOINT_DEMO_DIR": str(folder)},
    )


def count_effects(key: str) -> int:
    """How often the downstream under `$WAYPOINT_DEMO_DIR` saw `key`: for `waypoint torture`."""
    folder = demo_dir_from_env()
    return count_vendors(folder, key) + count_emails(folder, key)
