"""Pages of runs with a true total: newest first for a runs list, oldest-waiting first for waits.

SQL visibility (the dev server's, and a cluster's on PostgreSQL or MySQL) refuses ORDER BY: it
lists running runs newest-started first. A waiting list must begin with the longest wait, so
its page is found by counting: `count_workflows` narrows a window `WaypointWaitingSince <= T`
until it holds about a page (a few rounds of counts sent together), and that window is listed
and sorted here. The next page starts after the last row's (since, id), a keyset: a run that
starts or stops waiting between two pages moves no other run in or out of them.

A page token is opaque to callers and checked like any input: it names the query it was made
for, and a token that is not one this module made is refused (ValueError), never sent on.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
from datetime import UTC, datetime, timedelta

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from temporalio.client import Client, WorkflowExecution

from waypoint.client.listing import NAME, RunRow, row, stamp
from waypoint.protocol import search_attributes as sa

PAGE = 50
"""Runs a page lists unless asked otherwise: an inbox page of them stays under 100 KB."""
MAX_PAGE = 1000
WINDOW = 3
"""A window holding up to this many pages is listed whole rather than narrowed further."""
SPLITS = 4
"""Counts sent together in each narrowing round."""
REACH = tuple(
    timedelta(**{unit: n})
    for unit, n in (("minutes", 1), ("hours", 1), ("days", 1), ("days", 30), ("days", 3650))
)
"""The first round's distances (from now back, or from the last page's end on): waits bunch."""
SINCE = sa.WAITING_SINCE.name
TICK = timedelta(seconds=1)
"""Waits are published to the whole second, and bounds are whole seconds written `>=` and `<`,
never `=`: SQLite visibility compares times as text, so `=` matches nothing and a fraction
orders by its digits (measured on the dev server); `>= t+1s` is `> t` and `< t+1s` is `<= t`
there and on PostgreSQL alike."""
TOKEN_CHARS = 2000


class Page(BaseModel):
    """One page of runs, how many match in all, and the token of the next page ('' at the end)."""

    runs: list[RunRow]
    total: int
    """Every run the query matches now (`count_workflows`), not only those listed."""
    first: int = 0
    """How many runs the pages before this one listed."""
    next_page: str = ""


class _Token(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    q: str = Field(max_length=16)
    """The digest of the query (and order) it continues: a token serves no other list."""
    n: int = Field(ge=0, le=10**9)
    t: str = Field(default="", max_length=1500)
    """Temporal's page token, for a runs list."""
    s: datetime | None = None
    """For a waiting list: the last row's wait began then ..."""
    id: str = Field(default="", max_length=200)
    """... and this is its run (ties broken by id)."""


def _digest(query: str, waiting: bool) -> str:
    return hashlib.sha256(f"{waiting}\n{query}".encode()).hexdigest()[:16]


def _encode(token: _Token) -> str:
    return base64.urlsafe_b64encode(token.model_dump_json(exclude_defaults=True).encode()).decode()


def _decode(text: str, query: str, waiting: bool) -> _Token:
    """The token's position, or ValueError: not a token this list gave."""
    refused = ValueError("the page token is not one this list gave: start from its first page")
    if len(text) > TOKEN_CHARS:
        raise refused
    try:
        token = _Token.model_validate_json(base64.urlsafe_b64decode(text.encode("ascii")))
        if token.t:
            base64.urlsafe_b64decode(token.t.encode("ascii"))
    except (ValueError, ValidationError, binascii.Error, UnicodeError):
        raise refused from None
    keyed = token.s is not None and bool(NAME.match(token.id))
    kind_fits = keyed if waiting else token.s is None
    if token.q != _digest(query, waiting) or not kind_fits:
        raise refused
    return token


async def page(
    client: Client, query: str, *, size: int = PAGE, token: str = "", waiting: bool = False
) -> Page:
    """A page of the runs `query` (from `listing.query`) matches: newest or longest-waiting first.

    `waiting` sorts by `WaypointWaitingSince`, oldest first, and lists only runs that have it.

    Raises:
        ValueError: A `token` this list did not give.
    """
    size = max(1, min(size, MAX_PAGE))
    if not query:
        if token:
            raise ValueError("the page token is not one this list gave: start from its first page")
        return Page(runs=[], total=0)
    at = _decode(token, query, waiting) if token else None
    digest = _digest(query, waiting)
    if waiting:
        return await _oldest_waiting(client, f"{query} AND {SINCE} IS NOT NULL", size, at, digest)
    return await _newest(client, query, size, at, digest)


async def _count(client: Client, query: str) -> int:
    return (await client.count_workflows(query)).count


async def _newest(client: Client, query: str, size: int, at: _Token | None, digest: str) -> Page:
    """Temporal's own order and page token."""
    resume = base64.urlsafe_b64decode(at.t) if at and at.t else None
    listed = client.list_workflows(query, page_size=size, next_page_token=resume)
    total, _ = await asyncio.gather(_count(client, query), listed.fetch_next_page())
    rows = [await row(e) for e in listed.current_page or ()]
    first = at.n if at else 0
    more = listed.next_page_token and first + len(rows) < total
    after = _Token(q=digest, n=first + len(rows), t=_b64(listed.next_page_token or b""))
    return Page(runs=rows, total=total, first=first, next_page=_encode(after) if more else "")


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode()


async def _oldest_waiting(
    client: Client, query: str, size: int, at: _Token | None, digest: str
) -> Page:
    """The `size` longest waits after the token's (since, id), and how many wait in all."""
    rest = query
    if at is not None and at.s is not None:
        s, after = stamp(at.s), stamp(at.s + TICK)
        tie = f"{SINCE} >= '{s}' AND {SINCE} < '{after}' AND WorkflowId > '{at.id}'"
        rest += f" AND ({SINCE} >= '{after}' OR ({tie}))"
        total, left = await asyncio.gather(_count(client, query), _count(client, rest))
    else:
        total = left = await _count(client, query)
    window = rest
    if left > WINDOW * size:
        end = await _window_end(client, rest, size, at.s if at else None, left)
        window += f" AND {SINCE} < '{stamp(end + TICK)}'"
    found = [e async for e in client.list_workflows(window, page_size=MAX_PAGE)]
    found.sort(key=_key)
    rows = [await row(e) for e in found[:size]]
    first = at.n if at else 0
    if left <= len(rows):
        return Page(runs=rows, total=total, first=first)
    last = found[len(rows) - 1]
    after = _Token(q=digest, n=first + len(rows), s=_since(last), id=last.id)
    return Page(runs=rows, total=total, first=first, next_page=_encode(after))


def _second(when: datetime) -> datetime:
    return when.replace(microsecond=0)


def _since(execution: WorkflowExecution) -> datetime:
    value = execution.typed_search_attributes.get(sa.WAITING_SINCE)
    return value if isinstance(value, datetime) else datetime.max.replace(tzinfo=UTC)


def _key(execution: WorkflowExecution) -> tuple[datetime, str]:
    return _since(execution), execution.id


async def _window_end(
    client: Client, rest: str, size: int, after: datetime | None, left: int
) -> datetime:
    """An instant T such that `rest` holds at least `size` and few more waits begun by T.

    Invariant: fewer than `size` waits began by `low`; `high_n` (>= size) began by `high`.
    """
    now = _second(datetime.now(UTC))
    low = after or datetime(2000, 1, 1, tzinfo=UTC)
    high, high_n = max(now, low) + timedelta(days=1), left
    points = sorted(_second(after + d if after else now - d) for d in REACH)
    while high_n > WINDOW * size and high - low > TICK:
        split = {_second(low + (high - low) * i / (SPLITS + 1)) for i in range(1, SPLITS + 1)}
        points = [p for p in points if low < p < high] or sorted(p for p in split if low < p < high)
        if not points:
            break
        counts = await asyncio.gather(
            *(_count(client, f"{rest} AND {SINCE} < '{stamp(p + TICK)}'") for p in points)
        )
        for point, n in zip(points, counts, strict=True):
            if n >= size:
                high, high_n = point, n
                break
            low = point
        points = []
    return high
