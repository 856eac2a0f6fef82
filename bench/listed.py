"""Runs that wait for approval as visibility lists them, made cheaply: rows, not running loops.

Each is an `AgentWorkflow` started on a task queue no worker polls, with the search attributes
and memo a run parked at an approval publishes (`workflows.visibility`): the same row a list
reads, so the console pages, counts and renders it as it would the real one. No worker ever
runs them; they only stand in for real runs in a list (a real one is parked beside them where
that matters, `bench/console_inbox.py`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from temporalio.client import Client
from temporalio.common import SearchAttributePair, TypedSearchAttributes

from waypoint.protocol import MEMO_KEY, PendingApproval, RunMemo
from waypoint.protocol import search_attributes as sa

UNPOLLED = "waypoint-listed-nobody-polls"
AT_ONCE = 50
"""Starts in flight together."""


def waiting_memo(run: str, asked: datetime, state: str = "awaiting_approval") -> RunMemo:
    """The memo of a run parked at `pay`, asked at `asked` (none pending for a stuck state)."""
    pending = PendingApproval(
        step_id="t1.tool.0.pay",
        tool="pay",
        arguments={"to": "ada", "amount_cents": 500 + len(run)},
        arguments_hash="a" * 64,
        requested_at=asked.isoformat(),
    )
    return RunMemo(
        state=state,  # type: ignore[arg-type]
        detail="t1.tool.0.pay",
        turn=1,
        model="scripted",
        provider="scripted",
        pending_approvals=[pending] if state == "awaiting_approval" else [],
        total_tokens=120,
        cost_usd=0.0012,
        updated_at=asked.isoformat(),
    )


async def park_rows(
    client: Client,
    agent: str,
    ids: list[str],
    asked: Callable[[int], datetime],
    state: str = "awaiting_approval",
    memo: Callable[[str, datetime, str], RunMemo] = waiting_memo,
) -> None:
    """Start one stand-in per id, the i-th waiting since `asked(i)` (to the whole second)."""
    gate = asyncio.Semaphore(AT_ONCE)

    async def one(i: int, run: str) -> None:
        since = asked(i).astimezone(UTC).replace(microsecond=0)
        pairs = [
            SearchAttributePair(sa.AGENT, agent),
            SearchAttributePair(sa.STATUS, state),
            SearchAttributePair(sa.PENDING_APPROVALS, int(state == "awaiting_approval")),
            SearchAttributePair(sa.TURNS, 1),
            SearchAttributePair(sa.WAITING_SINCE, since),
        ]
        async with gate:
            await client.start_workflow(
                "AgentWorkflow",
                id=run,
                task_queue=UNPOLLED,
                memo={MEMO_KEY: memo(run, since, state)},
                search_attributes=TypedSearchAttributes(pairs),
            )

    await asyncio.gather(*(one(i, run) for i, run in enumerate(ids)))


def minutes_ago(now: datetime, spread: int) -> Callable[[int], datetime]:
    """The i-th waits since `i % spread` minutes before `now` (several to a second)."""
    return lambda i: now - timedelta(minutes=i % spread)
