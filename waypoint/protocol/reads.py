"""Reads of `fresh_for` tools as a run holds them, and their count at a glance."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from waypoint.protocol.base import _Frozen, _unset
from waypoint.protocol.hashing import canonical_json


class Observation(_Frozen):
    """A read of a tool with `fresh_for` the model holds: when it was read, what it returned."""

    step_id: str
    """The step whose result is the latest: the read, or its latest refresh."""
    tool: str
    arguments: dict[str, Any]
    tool_use_id: str
    """The call whose result in the transcript this is: gone from it, the read is not held."""
    digest: str
    read_at: str
    """When it was read: stamped by the tool's activity as the read ended (ISO 8601), or by
    the recorded clock asked after it; '' when neither said anything usable (the next clock
    dates it)."""
    refreshes: int = 0
    turn: int = Field(default=0, exclude_if=_unset)
    """The turn this copy was made in (the read, or its latest refresh): a fork after an
    earlier turn takes the copy it held then."""
    superseded: int = Field(default=0, exclude_if=_unset)
    """The turn a newer read of the same tool and arguments (or a refresh) replaced this copy
    in; 0 while it is the one in play. Kept only while a fork could start before then."""

    def key(self) -> str:
        """What makes two reads the same read: the tool and its arguments."""
        return canonical_json([self.tool, self.arguments])


class FreshReads(_Frozen):
    """`fresh_for` reads at a glance (`status`, the memo): held, read again, changed."""

    held: int = 0
    """Reads the run's context holds that are read again once older than their window."""
    refreshed: int = 0
    """Refresh steps in this history's ledger, failed ones too (`waypoint ledger` lists each)."""
    changed: int = 0
    """Of those, the ones whose result differed from what was recorded."""
    last: str = ""
    """The latest refresh, `step_id: summary`."""

    def counts(self) -> str:
        """`2 held (fresh_for), 3 read again, 1 changed`, as `status` and the Web UI say it."""
        return f"{self.held} held (fresh_for), {self.refreshed} read again, {self.changed} changed"
