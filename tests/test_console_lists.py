"""The console's lists at scale: paged from visibility with a true total, searched, linked.

1,005 runs waiting for approval (stand-ins: the rows a parked run publishes, on a queue no
worker polls, `bench/listed.py`), in a namespace of their own so no other test lists them.
The four oldest waits must be on the inbox's first page, every run listed exactly once across
the pages, and each page must say 1,005.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from html import unescape
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from bench.listed import park_rows
from tests.cli import ROOT, waypoint
from tests.conftest import LISTS_NAMESPACE, wait_for_visibility
from waypoint._console.access import Console
from waypoint._console.app import build_app
from waypoint._console.people import hash_token, save_entry
from waypoint._console.sessions import Sessions
from waypoint.client import listing, paging

pytestmark = pytest.mark.xdist_group("console-lists")  # one worker makes the 1,008 stand-ins

WAITING = 1005
OLDEST = 4
STUCK = 3
APPROVER = {"Authorization": "Bearer wpt_lists-approver"}
VIEWER = {"Authorization": "Bearer wpt_lists-viewer"}


@dataclass
class Lists:
    """The stand-ins, and a console over their namespace."""

    http: httpx.AsyncClient
    client: Client
    agent: str
    ids: list[str]
    oldest: list[str]
    stuck: list[str]
    now: datetime


@pytest.fixture(scope="module")
async def lists(
    env: WorkflowEnvironment, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Lists]:
    client = Client(
        env.client.service_client, namespace=LISTS_NAMESPACE, data_converter=pydantic_data_converter
    )
    agent = f"payer-{uuid.uuid4().hex[:6]}"
    now = datetime.now(UTC).replace(microsecond=0)
    ids = [f"{agent}-run-{i:04d}" for i in range(WAITING)]
    oldest = ids[-OLDEST:]  # started last, waiting longest: a start order is no wait order

    def asked(i: int) -> datetime:
        if i >= WAITING - OLDEST:
            return now - timedelta(days=3, minutes=i)
        return now - timedelta(seconds=i % 300)  # several to a second: ties broken by id

    await park_rows(client, agent, ids, asked)
    stuck = [f"{agent}-stuck-{i}" for i in range(STUCK)]
    await park_rows(client, agent, stuck, lambda i: now - timedelta(hours=1), "limit_reached")
    query = listing.query(agents=[agent], waiting="anyone")
    await wait_for_visibility(client, query, WAITING + STUCK)
    users = tmp_path_factory.mktemp("lists") / "users.toml"
    save_entry(users, "tokens", "approver", hash_token("wpt_lists-approver"), {agent: "approver"})
    save_entry(users, "tokens", "viewer", hash_token("wpt_lists-viewer"), {"*": "viewer"})
    console = Console(client=client, people_file=users, sessions=Sessions("lists"))
    transport = httpx.ASGITransport(app=build_app(console))
    async with httpx.AsyncClient(transport=transport, base_url="http://console") as http:
        yield Lists(http, client, agent, ids, oldest, stuck, now)


async def every_page(lists: Lists, path: str, headers: dict[str, str]) -> list[dict]:
    """Every page of a list, following `next_page`; each says the same true total."""
    pages, token = [], ""
    while True:
        answer = await lists.http.get(f"{path}&page={token}", headers=headers)
        assert answer.status_code == 200, answer.text
        pages.append(answer.json())
        assert len(answer.content) < 100_000 or "limit=500" in path  # a default page: < 100 KB
        token = pages[-1]["next_page"]
        if not token:
            return pages


async def test_waiting_runs_page_oldest_first_each_once_with_a_true_total(lists: Lists) -> None:
    pages = await every_page(lists, "/api/runs?waiting=me&limit=100", APPROVER)
    rows = [r for p in pages for r in p["runs"]]
    assert {p["total"] for p in pages} == {WAITING} and len(pages) == 11
    assert [r["run"] for r in rows[:OLDEST]] == lists.oldest[::-1]
    assert sorted(r["run"] for r in rows) == sorted(lists.ids)  # each once, none missing
    keys = [(r["waiting_since"], r["run"]) for r in rows]
    assert keys == sorted(keys)
    assert [p["first"] for p in pages] == list(range(0, WAITING, 100))
    operator = await every_page(lists, f"/api/runs?waiting=operator&agent={lists.agent}", VIEWER)
    assert [r["run"] for p in operator for r in p["runs"]] == sorted(lists.stuck)
    everyone = (await lists.http.get("/api/runs?waiting=anyone&limit=5", headers=VIEWER)).json()
    assert everyone["total"] == WAITING + STUCK
    newest = await every_page(lists, f"/api/runs?agent={lists.agent}&limit=500", VIEWER)
    assert sorted(r["run"] for p in newest for r in p["runs"]) == sorted(lists.ids + lists.stuck)


async def test_the_inbox_shows_the_true_total_and_the_oldest_waits_first(lists: Lists) -> None:
    first = await lists.http.get("/", headers=APPROVER)
    assert first.status_code == 200 and len(first.content) < 100_000
    assert f'<span class="count" title="runs waiting for your approval">{WAITING}</span>' in (
        first.text
    )
    shown = re.findall(r'class="card approval" data-run="([^"]+)"', first.text)
    assert shown[:OLDEST] == lists.oldest[::-1] and len(shown) == 25
    more = unescape(re.findall(r'rel="next" href="([^"]+)"', first.text)[0])
    second = await lists.http.get(more, headers=APPROVER)
    again = re.findall(r'class="card approval" data-run="([^"]+)"', second.text)
    assert len(again) == 25 and not set(again) & set(shown)
    assert "Runs 26–50 of 1005" in second.text
    assert link(second.text, "prev") == "/"  # the second page's previous is the first
    third = await lists.http.get(link(second.text, "next"), headers=APPROVER)
    assert "Runs 51–75 of 1005" in third.text
    back = await lists.http.get(link(third.text, "prev"), headers=APPROVER)
    assert cards(back.text) == again and "Runs 26–50 of 1005" in back.text
    assert link(back.text, "prev") == "/"
    saved = await lists.http.get(
        f"/?page={parse_qs(urlsplit(link(third.text, 'next')).query)['page'][0]}", headers=APPROVER
    )
    assert "Runs 76–100 of 1005" in saved.text and not link(saved.text, "prev")  # a saved link
    assert '<a href="/">First page</a>' in saved.text  # cannot go one back: to the first


async def test_the_inbox_shows_what_waits_on_a_role(lists: Lists) -> None:
    stuck = await lists.http.get("/?waiting=operator", headers=VIEWER)
    assert stuck.status_code == 200 and "Waiting on an operator" in stuck.text
    assert sorted(re.findall(r'class="card wait" data-run="([^"]+)"', stuck.text)) == sorted(
        lists.stuck
    )
    assert 'data-state="limit_reached"' in stuck.text and 'title="runs waiting">3<' in stuck.text
    approver = await lists.http.get("/?waiting=approver", headers=VIEWER)  # a viewer sees them
    assert f'title="runs waiting">{WAITING}<' in approver.text
    assert cards(approver.text)[:OLDEST] == lists.oldest[::-1]
    mine = await lists.http.get("/", headers=VIEWER)  # a viewer's own approvals: none
    assert "Nothing waits for your approval." in mine.text
    odd = await lists.http.get("/?waiting=somebody", headers=VIEWER)
    assert odd.status_code == 422


def cards(page: str) -> list[str]:
    """The runs an inbox page's approval cards are for, in order."""
    return re.findall(r'class="card approval" data-run="([^"]+)"', page)


def run_links(page: str) -> list[str]:
    """The runs a runs page lists, in order."""
    return re.findall(r'data-label="Run"><a href="/runs/([^"]+)">', page)


def link(page: str, rel: str) -> str:
    """A page's `rel` link ('' when it has none)."""
    found = re.findall(rf'rel="{rel}" href="([^"]+)"', page)
    return unescape(found[0]) if found else ""


async def test_runs_are_found_by_id_state_dates_and_a_saved_link(lists: Lists) -> None:
    agent, http = lists.agent, lists.http
    by_id = (await http.get(f"/api/runs?run={agent}-run-100", headers=VIEWER)).json()
    assert by_id["total"] == 5  # -run-1000 .. -run-1004 (the rest are -run-0100 ...)
    stuck = (await http.get(f"/api/runs?agent={agent}&state=limit_reached", headers=VIEWER)).json()
    assert sorted(r["run"] for r in stuck["runs"]) == sorted(lists.stuck)
    today = lists.now.date()
    dated = f"/api/runs?agent={agent}&started_from={today - timedelta(days=1)}&limit=1"
    assert (await http.get(dated, headers=VIEWER)).json()["total"] == WAITING + STUCK
    before = f"/api/runs?agent={agent}&started_to={today - timedelta(days=2)}"
    assert (await http.get(before, headers=VIEWER)).json()["total"] == 0
    closed = f"/api/runs?agent={agent}&closed_from={today}"
    assert (await http.get(closed, headers=VIEWER)).json()["total"] == 0  # none has closed
    search = f"run={agent}-stuck&state=limit_reached&waiting=operator&started_from={today}"
    page = await http.get(f"/runs?{search}", headers=VIEWER)
    assert page.status_code == 200
    saved = unescape(re.findall(r'href="([^"]+)" class="saved"', page.text)[0])
    assert saved == f"/runs?{search}"
    again = await http.get(saved, headers=VIEWER)
    listed = set(re.findall(r'<a href="/runs/([^"]+)">', again.text))
    assert listed == set(lists.stuck) and '<span class="total">3</span>' in again.text
    newest = await http.get(f"/runs?agent={agent}&limit=5", headers=VIEWER)
    second = await http.get(link(newest.text, "next"), headers=VIEWER)
    third = await http.get(link(second.text, "next"), headers=VIEWER)
    assert "Runs 11–15 of" in third.text and "limit=5" in link(third.text, "next")
    back = await http.get(link(third.text, "prev"), headers=VIEWER)
    assert "Runs 6–10 of" in back.text and run_links(back.text) == run_links(second.text)
    assert link(back.text, "prev") == f"/runs?agent={agent}&limit=5"


async def test_bad_filters_are_refused_422_never_500(lists: Lists) -> None:
    http = lists.http
    other = (await http.get("/api/runs?waiting=me&limit=2", headers=APPROVER)).json()["next_page"]
    for query in (
        "state=nonsense",
        "waiting=everybody",
        "started_from=2026-13-45",
        "closed_to=yesterday",
        "run=x'%20OR%20'1'='1",
        "page=not-a-token",
        f"page={other}",  # a waiting list's token for the newest-first list
        "page=" + "A" * 1999,
        "limit=0",
    ):
        answer = await http.get(f"/api/runs?{query}", headers=APPROVER)
        assert answer.status_code == 422, (query, answer.text)
        assert answer.headers["content-type"] == "application/problem+json"
        page = await http.get(f"/runs?{query}", headers={**APPROVER, "Accept": "text/html"})
        assert page.status_code == 422 and "text/html" in page.headers["content-type"], query
    for query in ("page=forged", "page=a%20b", "back=a%20b", "waiting=nobody"):
        refused = await http.get(f"/?{query}", headers=APPROVER)
        assert refused.status_code == 422, (query, refused.text)


def test_a_query_never_holds_user_text_unchecked() -> None:
    with pytest.raises(ValueError, match="not a run id"):
        listing.query(search=listing.Search(run="a' OR WorkflowId STARTS_WITH '"))
    with pytest.raises(ValueError, match="not a date"):
        listing.query(search=listing.Search(started_from="2026-01-01' OR '1'='1"))
    late = listing.query(search=listing.Search(started_to="9999-12-31", closed_from="0001-01-01"))
    assert "StartTime < '9000-01-01T00:00:00Z'" in late
    assert "CloseTime >= '1970-01-01T00:00:00Z'" in late
    with pytest.raises(ValueError, match="page token"):
        paging._decode("eyJxIjoiMDEyMyJ9", "q", waiting=False)  # {"q":"0123"}: no position


async def test_a_count_window_needs_few_counts(lists: Lists) -> None:
    """The oldest-first page is found by narrowing counts: a page, not the whole list, is read."""
    query = listing.query(agents=[lists.agent], waiting="approval")
    counted = 0
    real = lists.client.count_workflows

    async def counting(q: str):  # type: ignore[no-untyped-def]
        nonlocal counted
        counted += 1
        return await real(q)

    lists.client.count_workflows = counting  # type: ignore[method-assign]
    try:
        found = await paging.page(lists.client, query, size=50, waiting=True)
    finally:
        del lists.client.count_workflows
    assert [r.run for r in found.runs[:OLDEST]] == lists.oldest[::-1]
    assert found.total == WAITING and 2 <= counted <= 30


async def test_waypoint_list_takes_the_same_filters_and_pages(
    env: WorkflowEnvironment, lists: Lists
) -> None:
    shell = {
        **os.environ,
        "TEMPORAL_ADDRESS": env.client.service_client.config.target_host,
        "TEMPORAL_NAMESPACE": LISTS_NAMESPACE,
        "PYTHONPATH": str(ROOT),
    }
    asked = ["list", "--agent", lists.agent, "--waiting", "approval", "--limit", "3", "--json"]
    first = await asyncio.to_thread(waypoint, shell, *asked)
    assert first.returncode == 0, first.stderr
    assert [r["run"] for r in json.loads(first.stdout)] == lists.oldest[:0:-1]
    token = re.findall(r"runs 1-3 of 1005; next page: --page (\S+)", first.stderr)[0]
    second = await asyncio.to_thread(waypoint, shell, *asked, "--page", token)
    assert second.returncode == 0, second.stderr
    assert json.loads(second.stdout)[0]["run"] == lists.oldest[0]
    assert "runs 4-6 of 1005" in second.stderr
    wrong = await asyncio.to_thread(waypoint, shell, "list", "--started-from", "2026-02-30")
    assert wrong.returncode == 1 and "is not a date" in wrong.stderr
