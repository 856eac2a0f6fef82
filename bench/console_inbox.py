"""Console inbox: how long the console takes to list a thousand runs waiting for approval.

    python bench/console_inbox.py [--runs 1000] [--repeats 10]

Parks `--runs` real `AgentWorkflow` runs of `bench.agents.approver` (one effect call that needs
approval) on an in-process worker, in concurrent batches, and waits until visibility lists
them all as waiting. With the worker stopped (a list needs none), it times the console's
`GET /api/runs?waiting=me&limit=1000` and its inbox page `/` through the real ASGI app, as an
approver of every agent: medians, p90 and min over `--repeats`, and how many runs each listed.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
import temporalio  # noqa: E402

from bench.agents import approver  # noqa: E402
from bench.harness import Env, env, new_id  # noqa: E402
from bench.stats import table  # noqa: E402
from waypoint.client import listing, runs  # noqa: E402
from waypoint.console.access import Console  # noqa: E402
from waypoint.console.app import build_app  # noqa: E402
from waypoint.console.people import hash_token, save_entry  # noqa: E402
from waypoint.console.sessions import Sessions  # noqa: E402
from waypoint.operations.dev_server import temporal_binary  # noqa: E402

QUEUE = "console-inbox"
TOKEN = "wpt_bench-approver"
BATCH = 100
"""Runs started together; the next batch starts once the worker has parked most of them."""
TARGET_MS = 1000
"""A thousand waiting runs listed by the API within a second."""
API = f"/api/runs?waiting=me&limit={listing.MAX_LIST}"
PAGE = "/"


@dataclass
class Timed:
    """Seconds per request of one path, and how many runs each answer listed."""

    path: str
    seconds: list[float] = field(default_factory=list)
    listed: list[int] = field(default_factory=list)

    def row(self) -> list[str]:
        """One table row: median, p90, min in ms, and the runs listed."""
        ms = [s * 1000 for s in self.seconds]
        counts = sorted(set(self.listed))
        return [
            f"`{self.path}`",
            f"{statistics.median(ms):,.0f}",
            f"{p90(ms):,.0f}",
            f"{min(ms):,.0f}",
            ", ".join(f"{n:,}" for n in counts),
        ]


@dataclass
class Inbox:
    """What the benchmark measured."""

    runs: int
    park_seconds: float
    visible_seconds: float
    timed: list[Timed]

    def report(self) -> str:
        """The console-inbox table."""
        headers = ["request", "median (ms)", "p90 (ms)", "min (ms)", "runs listed"]
        rows = [t.row() for t in self.timed]
        head = (
            f"**Console inbox**: {self.runs:,} runs waiting for approval (parked in "
            f"{self.park_seconds:.0f} s, all listed by visibility {self.visible_seconds:.1f} s "
            f"later), {len(self.timed[0].seconds)} requests each through the ASGI app"
        )
        lines = [head, "", table(headers, rows)]
        api, page = self.timed
        if max(page.listed) < min(api.listed):
            lines += ["", f"`{PAGE}` renders {max(page.listed):,}: the page lists no more itself."]
        return "\n".join(lines)

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
    """`repeats` interleaved rounds of the API list and the inbox page."""
    api, page = Timed(API), Timed(PAGE)
    transport = httpx.ASGITransport(app=build_app(console(env)))
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with httpx.AsyncClient(
        transport=transport, base_url="http://console", headers=headers, timeout=60
    ) as http:
        await http.get(API)  # warm: imports, templates, the users file, the gRPC channel
        for _ in range(repeats):
            began = time.perf_counter()
            answer = await http.get(API)
            api.seconds.append(time.perf_counter() - began)
            answer.raise_for_status()
            api.listed.append(len(answer.json()))
            began = time.perf_counter()
            answer = await http.get(PAGE)
            page.seconds.append(time.perf_counter() - began)
            answer.raise_for_status()
            page.listed.append(answer.text.count('class="card approval"'))
    return [api, page]


async def console_inbox(bench: Env, count: int, repeats: int) -> Inbox:
    """Park `count` runs, wait for visibility to list them, then time the console's inbox."""
    began = time.perf_counter()
    async with bench.waypoint_worker([approver()], QUEUE):
        await park(bench, count)
        parked = time.perf_counter()
        await wait_listed(bench, count)
        listed = time.perf_counter()
    timed = await time_requests(bench, repeats)
    return Inbox(count, parked - began, listed - parked, timed)


async def main(count: int, repeats: int) -> None:
    """Run the benchmark on a dev server of its own and print its table."""
    print(
        f"{os.cpu_count()} cores, Python {platform.python_version()}, temporalio "
        f"{temporalio.__version__}, `{temporal_binary().name}` dev server (SQLite)\n",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="waypoint-bench-") as tmp:
        async with env(Path(tmp) / "console") as bench:
            inbox = await console_inbox(bench, count, repeats)
    median = statistics.median(inbox.api_ms)
    verdict = "met" if median <= TARGET_MS else "missed"
    print(inbox.report(), flush=True)
    print(f"\nTarget: {count:,} waiting runs listed by the API in <= 1 s: {verdict}.")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=1000, help="runs to park")
    parser.add_argument("--repeats", type=int, default=10, help="timed requests of each path")
    args = parser.parse_args()
    asyncio.run(main(args.runs, args.repeats))
