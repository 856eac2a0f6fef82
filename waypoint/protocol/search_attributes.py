"""The search attributes Waypoint sets, so the Web UI can filter runs by agent and state."""

from __future__ import annotations

from temporalio.common import SearchAttributeKey

AGENT = SearchAttributeKey.for_keyword("WaypointAgent")
STATUS = SearchAttributeKey.for_keyword("WaypointStatus")
PENDING_APPROVALS = SearchAttributeKey.for_int("WaypointPendingApprovals")
TURNS = SearchAttributeKey.for_int("WaypointTurns")
COST_USD = SearchAttributeKey.for_float("WaypointCostUsd")
WAITING_SINCE = SearchAttributeKey.for_datetime("WaypointWaitingSince")
"""Since when the run waits for a person (its oldest open call, or when it parked); unset
while it moves or once it ended. Lists sort the waiting by it, oldest first."""

ALL = (AGENT, STATUS, PENDING_APPROVALS, TURNS, COST_USD, WAITING_SINCE)


def cli_flags() -> list[str]:
    """`--search-attribute NAME=Type` flags for `temporal server start-dev`."""
    kinds = {"KEYWORD": "Keyword", "INT": "Int", "DOUBLE": "Double", "DATETIME": "Datetime"}
    return [
        flag
        for key in ALL
        for flag in ("--search-attribute", f"{key.name}={kinds[key.indexed_value_type.name]}")
    ]
