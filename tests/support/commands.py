"""`waypoint` commands that take minutes (killtest, torture), run against the session's server."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from temporalio.testing import WorkflowEnvironment

ROOT = Path(__file__).parent.parent.parent
BIN = Path(sys.executable).parent


def long_command(
    env: WorkflowEnvironment, *args: str, **variables: str
) -> subprocess.CompletedProcess[str]:
    """The installed `waypoint ARGS`, `variables` added to its environment, within 10 minutes."""
    return subprocess.run(
        [str(BIN / "waypoint"), *args],
        env={
            **os.environ,
            "TEMPORAL_ADDRESS": env.client.service_client.config.target_host,
            "PYTHONPATH": str(ROOT),
            **variables,
        },
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
