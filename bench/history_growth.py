"""History growth: Waypoint's bounded shape against the naive one, measured in the same run.

    python bench/history_growth.py [--turns 1000] [--output-kb 5] [--streaming on|off]

A scripted agent runs `--turns` turns, each calling one tool that returns ~5 KB. Waypoint
continues-as-new with a compacted transcript, sends only new messages to the model step and
keeps large payloads in a content-addressed store. The naive shape (a workflow that passes the
whole transcript inline to every model activity, no continue-as-new) runs beside it until
Temporal stops it. Prints, at turns 10/100/1,000: the history segment, its events and bytes so
far, bytes added per turn, and external-store bytes; then every segment's totals.
`--streaming on` streams Claude's words and keeps a reader (`runs.events`) attached to the run
for its whole life, so what a watched run adds to its history is measured; `off` has neither.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pydantic import BaseModel  # noqa: E402
from temporalio.client import Client, WorkflowHandle  # noqa: E402
from temporalio.contrib.pydantic import pydantic_data_converter  # noqa: E402
from temporalio.worker import Worker  # noqa: E402

from bench.naive_agent import (  # noqa: E402
    NaiveAgent,
    document,  # noqa: E402
    naive_model,
    naive_tool,
)
from waypoint._agent import Agent  # noqa: E402
from waypoint._operations.dev_server import free_port, start_dev_server  # noqa: E402
from waypoint._plugin import WorkerOptions  # noqa: E402
from waypoint._tools import tool  # noqa: E402
from waypoint._worker import build_worker  # noqa: E402
from waypoint.client import runs  # noqa: E402
from waypoint.protocol import Limits, RunInput, RunResult  # noqa: E402
from waypoint.stores.payloads import data_converter  # noqa: E402
from waypoint.testing import reply, text, tool_use  # noqa: E402

CHECKPOINTS = (10, 100, 1000)


class FetchArgs(BaseModel):
    n: int


def bench_agent(turns: int, size: int) -> Agent:
    @tool("read")
    async def fetch(args: FetchArgs) -> str:
        """Fetch a record."""
        return document(args.n, size)

    script = [reply(text(f"turn {k}"), tool_use("fetch", n=k)) for k in range(1, turns)]
    script.append(reply(text("done")))
    return Agent(
        name="bench",
        model="claude-sonnet-4-6",
        system="benchmark",
        tools=[fetch],
        limits=Limits(max_turns=turns + 10, max_continue_as_new=10_000),
        script=script,
    )


# --- measuring ---------------------------------------------------------------------------------


@dataclass
class Sample:
    turn: int
    segment: int
    events: int
    bytes: int
    store: int


def dir_bytes(*paths: Path) -> int:
    return sum(
        p.stat().st_size for root in paths if root.exists() for p in root.rglob("*") if p.is_file()
    )


async def sample_run(
    handle: WorkflowHandle, turn_of, stores: list[Path], done: asyncio.Future
) -> list[Sample]:
    samples: list[Sample] = []
    while not done.done():
        try:
            desc = await handle.describe()
            info = desc.raw_description.workflow_execution_info
            turn, segment = await turn_of()
            samples.append(
                Sample(
                    turn, segment, info.history_length, info.history_size_bytes, dir_bytes(*stores)
                )
            )
        except Exception:
            pass
        await asyncio.sleep(0.05)
    return samples


def at(samples: list[Sample], turn: int) -> Sample | None:
    return next((s for s in samples if s.turn >= turn), None)


def per_turn(samples: list[Sample], turn: int) -> float | None:
    """Bytes added per turn around `turn`, within one segment."""
    here = at(samples, turn)
    if here is None:
        return None
    earlier = [s for s in samples if s.segment == here.segment and s.turn < here.turn]
    if not earlier:
        return None
    first = earlier[max(0, len(earlier) - 40)]
    return (here.bytes - first.bytes) / max(1, here.turn - first.turn)


async def segments(client: Client, workflow_id: str) -> list[tuple[int, int, int]]:
    """(events, bytes, largest event) of every segment of a continue-as-new chain, in order."""
    chain = []
    async for wf in client.list_workflows(f"WorkflowId = '{workflow_id}'"):
        chain.append((wf.start_time, wf.run_id))
    out = []
    for _, run_id in sorted(chain):
        handle = client.get_workflow_handle(workflow_id, run_id=run_id)
        events = total = largest = 0
        async for event in handle.fetch_history_events():
            events += 1
            size = event.ByteSize()
            total += size
            largest = max(largest, size)
        out.append((events, total, largest))
    return out


def row(label: str, s: Sample | None, added: float | None) -> str:
    if s is None:
        return f"| {label} | not reached | | | | |"
    added_s = f"{added:,.0f}" if added is not None else "-"
    return f"| {label} | {s.segment + 1} | {s.events:,} | {s.bytes:,} | {added_s} | {s.store:,} |"


async def watch(client: Client, run: str) -> int:
    """Read the run's events as they happen, as `waypoint watch` would; count them."""
    return sum([1 async for _ in runs.events(client, run)])


async def main(turns: int, size_kb: int, streaming: bool = False) -> None:
    size = size_kb * 1024
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        server = start_dev_server(work / "state", port=free_port(), ui_port=free_port())
        try:
            store, transcripts = work / "payloads", work / "transcripts"
            client = await Client.connect(server.address, data_converter=data_converter(store))
            naive_client = await Client.connect(
                server.address, data_converter=pydantic_data_converter
            )
            agent = bench_agent(turns, size)
            worker = build_worker(
                client,
                [agent],
                task_queue="bench",
                options=WorkerOptions(transcripts=transcripts, live_text=streaming),
            )
            naive_worker = Worker(
                naive_client,
                task_queue="naive",
                workflows=[NaiveAgent],
                activities=[naive_model, naive_tool],
            )
            async with worker, naive_worker:
                started = time.monotonic()
                handle = await client.start_workflow(
                    "AgentWorkflow",
                    RunInput(agent="bench", task="benchmark"),
                    id="history-growth",
                    task_queue="bench",
                    result_type=RunResult,
                )
                naive = await naive_client.start_workflow(
                    NaiveAgent.run,
                    args=[turns, size],
                    id="history-growth-naive",
                    task_queue="naive",
                )

                async def waypoint_turn() -> tuple[int, int]:
                    s = await runs.status(client, handle.id)
                    return s.turn, s.continues

                async def naive_turn() -> tuple[int, int]:
                    return await naive.query(NaiveAgent.current_turn), 0

                done = asyncio.ensure_future(handle.result())
                watcher = asyncio.ensure_future(watch(client, handle.id) if streaming else done)
                naive_done = asyncio.ensure_future(naive.result())
                sampler = asyncio.ensure_future(
                    sample_run(handle, waypoint_turn, [store, transcripts], done)
                )
                naive_sampler = asyncio.ensure_future(sample_run(naive, naive_turn, [], naive_done))
                result = await done
                seen = await watcher if streaming else 0
                elapsed = time.monotonic() - started
                try:
                    await asyncio.wait_for(asyncio.shield(naive_done), timeout=5)
                    naive_end = f"completed {naive_done.result()} turns"
                except Exception as err:
                    desc = await naive.describe()
                    naive_end = f"{desc.status.name if desc.status else '?'} ({type(err).__name__})"
                    if not naive_done.done():
                        await naive.terminate("benchmark over")
                        naive_end = "stuck: its workflow task cannot complete; terminated"
                samples, naive_samples = await sampler, await naive_sampler
                chain = await segments(client, handle.id)
        finally:
            server.stop()

    mode = f"on ({seen:,} events read live)" if streaming else "off"
    print(f"\nWaypoint: {result.turns} turns in {elapsed:.0f}s, {len(chain)} history segments")
    print(f"streaming: {mode}\n")
    print(
        "| turn | segment | events in segment | history bytes in segment | bytes added/turn "
        "| external store bytes |"
    )
    print("|---|---|---|---|---|---|")
    for t in CHECKPOINTS:
        print(row(f"waypoint {t}", at(samples, t), per_turn(samples, t)))
    for t in CHECKPOINTS:
        print(row(f"naive {t}", at(naive_samples, t), per_turn(naive_samples, t)))
    last = naive_samples[-1] if naive_samples else None
    print(
        f"\nnaive shape: {naive_end}; last seen at turn {last.turn if last else '?'} "
        f"with {last.bytes if last else 0:,} history bytes"
    )
    print("\n| segment | events | history bytes | largest event |")
    print("|---|---|---|---|")
    for i, (events, total, largest) in enumerate(chain, start=1):
        print(f"| {i} | {events:,} | {total:,} | {largest:,} |")
    worst = max(chain, key=lambda c: c[1])
    print(
        f"\nlargest segment {worst[1]:,} bytes / {max(c[0] for c in chain):,} events; "
        f"largest event {max(c[2] for c in chain):,} bytes"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--turns", type=int, default=1000)
    parser.add_argument("--output-kb", type=int, default=5)
    parser.add_argument("--streaming", choices=["on", "off"], default="off")
    args = parser.parse_args()
    asyncio.run(main(args.turns, args.output_kb, args.streaming == "on"))
