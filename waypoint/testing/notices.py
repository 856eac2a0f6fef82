"""A stand-in `waypoint.notice_plan` and `waypoint.notify` for tests: a plan, a SQLite inbox.

Same names and types as the delivery side's activities, for what only a test needs: a receiver
that fails a number of times or always, or hangs until the test lets it go. The inbox
deduplicates on (key, channel), as a receiver should; `attempts` records every try. A worker
process takes them from `WAYPOINT_NOTICE_ACTIVITIES=waypoint.testing.notices:from_env`, which
reads `WAYPOINT_TEST_RECEIVER=MODE:FOLDER` (the torture test's receivers).
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
from datetime import timedelta
from pathlib import Path

from temporalio import activity
from temporalio.exceptions import ApplicationError

from waypoint.protocol.notices import NOTICE_PLAN, NOTIFY, Delivery, NoticePlan, NoticeRequest

ALWAYS = -1
"""`failures` value for a receiver that never accepts."""
RECEIVER_ENV = "WAYPOINT_TEST_RECEIVER"
MODES: dict[str, dict[str, int]] = {"ok": {}, "flaky": {"chat": 2}, "down": {"chat": ALWAYS}}
"""What `from_env`'s receivers do: all accept; `chat` fails twice first; `chat` never accepts."""
PLAN = NoticePlan(
    routes={"approver": ["ops", "chat"], "lead": ["pager"]},
    remind_after=timedelta(seconds=2),
    escalate_after=timedelta(seconds=3),
    escalate_to="lead",
)
"""`from_env`'s plan: approvers on two channels, reminded every 2 s, the lead told after 3 s."""


class NoticeReceiver:
    """The plan every agent gets, and the channels' inbox at `db`.

    `failures`: channel -> how many tries fail before one is accepted (`ALWAYS`: none is).
    `hold`: channel -> an event the delivery waits for before it is accepted (a receiver that
    hangs). `reached`: a file touched when a delivery attempt starts (a kill point).
    """

    def __init__(
        self,
        db: Path,
        plan: NoticePlan,
        *,
        failures: dict[str, int] | None = None,
        hold: dict[str, asyncio.Event] | None = None,
        reached: Path | None = None,
        stall: float = 0.0,
    ) -> None:
        self.db = db
        self.plan = plan
        self.failures = failures or {}
        self.hold = hold or {}
        self.reached = reached
        self.stall = stall
        """Seconds the first attempt of a `waiting` notice waits after `reached` is touched (a
        worker killed meanwhile)."""
        with self._db() as c:
            c.execute(
                "CREATE TABLE IF NOT EXISTS inbox (key TEXT, channel TEXT, event TEXT, "
                "role TEXT, decided_by TEXT, PRIMARY KEY (key, channel))"
            )
            c.execute("CREATE TABLE IF NOT EXISTS attempts (key TEXT, channel TEXT, attempt INT)")

    def _db(self) -> sqlite3.Connection:
        return sqlite3.connect(self.db)

    @activity.defn(name=NOTICE_PLAN)
    async def notice_plan(self, agent: str) -> NoticePlan:
        """The same plan for every agent."""
        return self.plan

    @activity.defn(name=NOTIFY)
    async def notify(self, request: NoticeRequest) -> Delivery:
        """Accept the notice once per (key, channel); fail or hang as told."""
        info, notice, channel = activity.info(), request.notice, request.channel
        with self._db() as c:
            c.execute("INSERT INTO attempts VALUES (?, ?, ?)", (notice.key, channel, info.attempt))
        if self.reached is not None:
            self.reached.touch()
            if info.attempt == 1 and self.stall and notice.event == "waiting":
                await asyncio.sleep(self.stall)
        if channel in self.hold:
            await self.hold[channel].wait()
        failing = self.failures.get(channel, 0)
        if failing == ALWAYS or info.attempt <= failing:
            last = (
                info.retry_policy is not None and info.attempt >= info.retry_policy.maximum_attempts
            )
            if last:
                return Delivery(channel=channel, key=notice.key, status="failed",
                                attempts=info.attempt, detail="receiver down")  # fmt: skip
            raise ApplicationError(f"{channel} is down")
        with self._db() as c:
            new = c.execute(
                "INSERT OR IGNORE INTO inbox VALUES (?, ?, ?, ?, ?)",
                (notice.key, channel, notice.event, notice.role, notice.decided_by),
            ).rowcount
        status = "sent" if new else "duplicate"
        return Delivery(channel=channel, key=notice.key, status=status, attempts=info.attempt)

    def activities(self) -> list[object]:
        """Both, to hand a test worker's `activities=`."""
        return [self.notice_plan, self.notify]

    def inbox(self) -> list[tuple[str, str, str, str, str]]:
        """What the receivers accepted: (key, channel, event, role, decided_by), in order."""
        with self._db() as c:
            return c.execute("SELECT * FROM inbox ORDER BY rowid").fetchall()

    def tries(self, channel: str) -> list[tuple[str, int]]:
        """Every try on `channel`: (key, attempt)."""
        with self._db() as c:
            rows = c.execute("SELECT key, attempt FROM attempts WHERE channel = ?", (channel,))
            return rows.fetchall()


def from_env() -> list[object]:
    """The activities of the receiver `WAYPOINT_TEST_RECEIVER=MODE:FOLDER` describes."""
    mode, _, folder = os.environ.get(RECEIVER_ENV, "ok:.").partition(":")
    receiver = NoticeReceiver(Path(folder) / "inbox.db", PLAN, failures=MODES[mode])
    return receiver.activities()
