"""The agents a worker subprocess runs in CLI and kill tests (`--app tests.cli_app:agents`)."""

from __future__ import annotations

import os
from pathlib import Path

from tests.agents import PAY_SCRIPT, Payments, build_agent
from waypoint.agent import Agent


def agents() -> list[Agent]:
    """The payer agent, paying into the SQLite file named by WAYPOINT_TEST_PAYMENTS."""
    payments = Payments(Path(os.environ["WAYPOINT_TEST_PAYMENTS"]))
    return [build_agent(payments, PAY_SCRIPT, approval=True)]
