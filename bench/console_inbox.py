"""Console inbox: how long the console takes to page ten thousand runs waiting for approval.

    python bench/console_inbox.py [--runs 10000] [--real 100] [--repeats 10]

Parks `--real` real `AgentWorkflow` runs of `bench.agents.approver` (one effect call that needs
approval) on an in-process worker, in concurrent batches. The rest of `--runs` are stand-ins
(`bench/listed.py`): started on a queue no worker polls, with the search attributes and memo a
parked run publishes, its memo copied from a real one; a list reads the same rows, and starting
them costs a start each instead of a run's two workflow tasks and an activity. Each stand-in
waits since a time spread over the last day, the real runs since they parked. With the worker
stopped (a list needs none), it times the console's `GET /api/runs?waiting=me` (its default
page), the inbox page `/`, and the inbox's second page, through the real ASGI app, as an
approver of every agent: medians, p90 and min over `--repeats`, each answer's size, and the
total each says.
"""

from __future__ import annotations

import argparse
import asyncio
import html
import os
import platform
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
import temporalio  # noqa: E402

from bench.agents import approver  # noqa: E402
from bench.harness import Env, env, new_id  # noqa: E402
from bench.listed import park_rows  # noqa: E402
from bench.stats import table  # noqa: E402
from waypoint._console.access import Console  # noqa: E402
from waypoint._console.app import build_app  # noqa: E402
from waypoint._console.people import hash_token, save_entry  # noqa: E402
from waypoint._console.sessions import Sessions  # noqa: E402
from waypoint._operations.dev_server import temporal_binary  # noqa: E402
from waypoint.client import listing, runs  # noqa: E402
from waypoint.protocol import MEMO_KEY, RunMemo  # noqa: E402

QUEUE = "console-inbox"
TOKEN = "wpt_bench-approver"
BATCH = 100
"""Runs started together; the next batch starts once the worker has parked most of them."""
TARGET_MS = 300
"""The API's first page of ten thousand waiting runs within 300 ms (and the inbox's)."""
API = "/api/runs?waiting=me"
PAGE = "/"
NEXT = "the inbox's page 2"
REAL = 100
"""Real parked runs among them; the rest are stand-ins."""


@dataclass
class Timed:
    """Seconds per request of one path, and how many runs each answer listed."""

    path: str
    seconds: list[float] = field(default_factory=list)
    listed: list[int] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
    totals: list[int] = field(default_factory=list)

    def row(self) -> list[str]:
        """One table row: median, p90, min in ms, runs listed, size, the total it said."""
        ms = [s * 1000 for s in self.seconds]
        return [
            self.path if self.path == NEXT else f"`{self.path}`",
            f"{statistics.median(ms):,.0f}",
            f"{p90(ms):,.0f}",
            f"{min(ms):,.0f}",
            ", ".join(f"{n:,}" for n in sorted(set(self.listed))),
            f"{max(self.sizes) / 1000:,.0f} KB",
            ", ".join(f"{n:,}" for n in sorted(set(self.totals))),
        ]


@dataclass
class Inbox:
    """What the benchmark measured."""

    runs: int
    real: int
    park_seconds: float
    visible_seconds: float
    timed: list[Timed]

    def report(self) -> str:
        """The console-inbox table."""
        headers = ["request", "median (ms)", "p90 (ms)", "min (ms)", "runs", "size", "total"]
        rows = [t.row() for t in self.timed]
        head = (
            f"**Console inbox**: {self.runs:,} runs waiting for approval ({self.real:,} real "
            f"parked runs, {self.runs - self.real:,} stand-ins with a real one's memo; made in "
            f"{self.park_seconds:.0f} s, all listed by visibility {self.visible_seconds:.1f} s "
            f"later), {len(self.timed[0].seconds)} requests each through the ASGI app"
        )
        return "\n".join([head, "", table(headers, rows)])

    @property
    def api_ms(self) -> list[float]:
        """Milliseconds per API list request."""
        return [s * 1000 for s in self.timed[0].seconds]


def p90(values: Sequence[float]) -> float:
    """The 90th percentile (the one value when there is only one)."""
    if len(values) < 2:
        return values[0]
    return statistics.quantiles(values, n=10, method="inclusive")[-1]


async def _waiting(env: Env) -> int:
    query = listing.query(agents=None, waiting=True)
    return (await env.client.count_workflows(query)).count


async def stand_ins(env: Env, count: int) -> None:
    """`count` stand-ins whose memo is a real parked run's, waiting since over the last day."""
    template = None
    async for execution in env.client.list_workflows(listing.query(waiting=True), limit=1):
        template = await execution.memo_value(MEMO_KEY, type_hint=RunMemo)
    assert isinstance(template, RunMemo), "no real run parked to copy"
    (pending,) = template.pending_approvals

    def memo(run: str, since: datetime, state: str) -> RunMemo:
        asked = pending.model_copy(update={"requested_at": since.isoformat()})
        return template.model_copy(update={"pending_approvals": [asked]})

    now = datetime.now(UTC)
    ids = [new_id("stand-in") for _ in range(count)]
    await park_rows(
        env.client, "approve", ids, lambda i: now - timedelta(seconds=i * 86400 // count), memo=memo
    )


async def park(env: Env, count: int) -> None:
    """Start `count` runs in batches and return once the server has them all waiting."""
    started = 0
    while started < count:
        batch = min(BATCH, count - started)
        await asyncio.gather(
            *(
                runs.start_run(
                    env.client, "approve", "pay", task_queue=QUEUE, workflow_id=new_id("inbox")
                )
                for _ in range(batch)
            )
        )
        started += batch
        while await _waiting(env) < started - BATCH // 2:  # keep the worker fed, not flooded
            await asyncio.sleep(0.2)


async def wait_listed(env: Env, count: int, timeout: float = 300) -> None:
    """Wait until visibility counts `count` runs waiting for approval."""
    deadline = time.monotonic() + timeout
    while (seen := await _waiting(env)) < count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"visibility lists {seen} of {count} waiting runs")
        await asyncio.sleep(0.2)


def console(env: Env) -> Console:
    """A console whose one API token approves for every agent."""
    users = env.work / "console-users.toml"
    save_entry(users, "tokens", "bench", hash_token(TOKEN), {"*": "approver"})
    return Console(client=env.client, people_file=users, sessions=Sessions("bench"))


async def time_requests(env: Env, repeats: int) -> list[Timed]:
    """`repeats` interleaved rounds of the API list, the inbox page and its second page."""
    api, page, later = Timed(API), Timed(PAGE), Timed(NEXT)
    transport = httpx.ASGITransport(app=build_app(console(env)))
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with httpx.AsyncClient(
        transport=transport, base_url="http://console", headers=headers, timeout=60
    ) as http:
        await http.get(API)  # warm: imports, templates, the users file, the gRPC channel
        for _ in range(repeats):
            body = (await timed(http, API, api)).json()
            api.listed.append(len(body["runs"]))
            api.totals.append(body["total"])
            text = (await timed(http, PAGE, page)).text
            cards(page, text)
            second = html.unescape(re.findall(r'rel="next" href="([^"]+)"', text)[0])
            cards(later, (await timed(http, second, later)).text)
    return [api, page, later]


def cards(into: Timed, shown: str) -> None:
    """Note the approval cards an inbox page shows and the total it says."""
    into.listed.append(shown.count('class="card approval"'))
    found = re.search(r'title="runs waiting for your approval">([0-9]+)<', shown)
    into.totals.append(int(found.group(1)) if found else 0)


async def timed(http: httpx.AsyncClient, path: str, into: Timed) -> httpx.Response:
    """GET `path`, noting its time and size in `into`."""
    began = time.perf_counter()
    answer = await http.get(path)
    into.seconds.append(time.perf_counter() - began)
    answer.raise_for_status()
    into.sizes.append(len(answer.content))
    return answer


async def console_inbox(bench: Env, count: int, repeats: int, real: int = REAL) -> Inbox:
    """Park `real` runs and stand-ins up to `count`, wait for visibility to list them all, then
    time the console's inbox."""
    real = min(real, count)
    began = time.perf_counter()
    async with bench.waypoint_worker([approver()], QUEUE):
        await park(bench, real)
        await wait_listed(bench, real)
    await stand_ins(bench, count - real)
    parked = time.perf_counter()
    await wait_listed(bench, count)
    listed = time.perf_counter()
    measured = await time_requests(bench, repeats)
    return Inbox(count, real, parked - began, listed - parked, measured)


async def main(count: int, repeats: int, real: int) -> None:
    """Run the benchmark on a dev server of its own and print its table."""
    print(
        f"{os.cpu_count()} cores, Python {platform.python_version()}, temporalio "
        f"{temporalio.__version__}, `{temporal_binary().name}` dev server (SQLite)\n",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="waypoint-bench-") as tmp:
        async with env(Path(tmp) / "console") as bench:
            inbox = await console_inbox(bench, count, repeats, real)
    median = statistics.median(inbox.api_ms)
    verdict = "met" if median <= TARGET_MS else "missed"
    print(inbox.report(), flush=True)
    print(f"\nTarget: the first page of {count:,} waiting runs in <= 300 ms: {verdict}.")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=10_000, help="runs waiting in all")
    parser.add_argument("--real", type=int, default=REAL, help="of them, real parked runs")
    parser.add_argument("--repeats", type=int, default=10, help="timed requests of each path")
    args = parser.parse_args()
    asyncio.run(main(args.runs, args.repeats, args.real))
