"""The durability dial: a read-heavy agent in `step` and `turn` mode, beside raw Temporal.

    python bench/durability.py [--runs 20] [--turns 10] [--repeats 3]

Every reply of a zero-latency scripted model asks for 8 `read` calls of a no-op tool at once,
for `--turns` turns, then answers. Each repeat runs three systems in a rotating order: (a)
Waypoint with `durability="step"`, each read its own activity; (b) Waypoint with
`durability="turn"`, a reply's reads local activities in one workflow task; (c) raw Temporal
in the same shape (per turn a model activity, then 8 activities at once), its payload sizes
read from (a)'s history. A step is one model or tool call; Waypoint's spec snapshot is not one,
though its events and actions are counted. Figures: ms per step of one run alone, steps per
second of `--runs` concurrent runs, and, from every run's history, events and Temporal Cloud
actions per step (`actions`).
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
from collections import defaultdict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import temporalio  # noqa: E402
from temporalio.api.enums.v1 import EventType, WorkflowTaskFailedCause  # noqa: E402
from temporalio.api.history.v1 import HistoryEvent  # noqa: E402
from temporalio.worker import Worker  # noqa: E402

from bench import history  # noqa: E402
from bench.agents import noop_read  # noqa: E402
from bench.harness import Env, env, new_id, raw_sizes  # noqa: E402
from bench.procs import cpu_seconds  # noqa: E402
from bench.raw_workflow import RawTurns, TurnShape, raw_step  # noqa: E402
from bench.stats import Spread, ratio, table  # noqa: E402
from waypoint._agent import Agent  # noqa: E402
from waypoint._operations.dev_server import temporal_binary  # noqa: E402
from waypoint.client import runs  # noqa: E402
from waypoint.protocol import Limits  # noqa: E402
from waypoint.testing import reply, text, tool_use  # noqa: E402

E = EventType
CALLS = 8
"""`read` calls in every reply but the last."""
TARGET = 1.5
"""`turn` moves at least this many times the steps per second of `step`."""
STEP, TURN, RAW = "step", "turn", "raw"
LABELS = {
    STEP: '(a) Waypoint, durability="step" (8 activities a turn)',
    TURN: '(b) Waypoint, durability="turn" (8 local activities a turn)',
    RAW: "(c) raw Temporal, a model activity then 8 activities a turn",
}
QUEUE, RAW_QUEUE = "durability", "durability-raw"
MODEL, TOOL = "waypoint.call_model", "waypoint.run_tool"
LOCAL_ACTIVITY_MARKERS = ("core_local_activity", "LocalActivity")
"""Marker names of local activities: sdk-core (Python, TypeScript, .NET, Ruby) and Go/Java."""


def steps_of(turns: int) -> int:
    """Steps of one run: a model call and `CALLS` reads per turn, then the final model call."""
    return turns * (CALLS + 1) + 1


def reader(turns: int) -> Agent:
    """`turns` replies of `CALLS` parallel no-op reads each, then a final text."""
    script = [
        reply(*(tool_use("noop", n=k * 10 + c) for c in range(CALLS))) for k in range(1, turns + 1)
    ]
    return Agent(
        name=f"read{CALLS}x{turns}",
        model="bench",
        system="benchmark",
        tools=[noop_read],
        limits=Limits(max_turns=turns + 2),
        script=[*script, reply(text("done"))],
    )


def actions(events: Sequence[HistoryEvent]) -> int:
    """Temporal Cloud's billable actions in one run's history: an estimate, as Cloud's own is.

    Follows the History Event Type column of "Temporal Cloud Actions"
    (https://docs.temporal.io/cloud/actions): a workflow start (client, continue-as-new, child)
    is one action; a child start initiated two; each search-attribute upsert one, unless it sets
    only `TemporalChangeVersion`; each activity scheduled one, and each retry one (`attempt - 1`
    on its started event); all the markers one workflow task records (its local activities)
    one, plus the local-activity retries its completion meters; each timer, signal received,
    accepted update, options update, reset, Nexus operation scheduled or cancel requested one.
    The page counts "all RecordMarkers from each Workflow Task as one action", so a task that
    records only `patched()` markers counts one too, as the server's own `action` metric does
    (`command_BatchMarkers` in temporalio/temporal's frontend telemetry interceptor). That metric
    also counts `TemporalChangeVersion` upserts and memo updates (workflow properties modified,
    two a Waypoint run), which the Cloud page does not list: they are left out here. What no
    history shows is not counted, as the page warns: queries, activity heartbeats (Waypoint's
    first is at 1 s, later than this bench's no-op steps take), workflow-task heartbeats (a
    local activity outliving the task timeout), schedules, exports.
    """
    one = {
        E.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED,
        E.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED,
        E.EVENT_TYPE_TIMER_STARTED,
        E.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED,
        E.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED,
        E.EVENT_TYPE_WORKFLOW_EXECUTION_OPTIONS_UPDATED,
        E.EVENT_TYPE_NEXUS_OPERATION_SCHEDULED,
        E.EVENT_TYPE_NEXUS_OPERATION_CANCEL_REQUESTED,
    }
    count = 0
    marked_tasks: set[int] = set()
    for ev in events:
        kind = ev.event_type
        if kind in one:
            count += 1
        elif kind == E.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED:
            count += 2  # the intent recorded, and the attempt to start
        elif kind == E.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES:
            fields = ev.upsert_workflow_search_attributes_event_attributes.search_attributes
            count += set(fields.indexed_fields) != {"TemporalChangeVersion"}
        elif kind == E.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            count += max(0, ev.activity_task_started_event_attributes.attempt - 1)
        elif kind == E.EVENT_TYPE_MARKER_RECORDED:
            marked_tasks.add(ev.marker_recorded_event_attributes.workflow_task_completed_event_id)
        elif kind == E.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            meter = ev.workflow_task_completed_event_attributes.metering_metadata
            count += meter.nonfirst_local_activity_execution_attempts
        elif kind == E.EVENT_TYPE_WORKFLOW_TASK_FAILED:
            cause = ev.workflow_task_failed_event_attributes.cause
            count += cause == WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_RESET_WORKFLOW
    return count + len(marked_tasks)


def local_markers(events: Sequence[HistoryEvent]) -> int:
    """Local-activity markers in a history (each a local activity that ran)."""
    return sum(
        ev.event_type == E.EVENT_TYPE_MARKER_RECORDED
        and ev.marker_recorded_event_attributes.marker_name in LOCAL_ACTIVITY_MARKERS
        for ev in events
    )


def shape_of(events: Sequence[HistoryEvent], turns: int) -> TurnShape:
    """The raw run's shape, with the median payload sizes of a Waypoint model and tool step."""
    scheduled: dict[int, tuple[str, int]] = {}
    sizes: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for ev in events:
        if ev.event_type == E.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attrs = ev.activity_task_scheduled_event_attributes
            scheduled[ev.event_id] = (attrs.activity_type.name, attrs.input.ByteSize())
        elif ev.event_type == E.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            done = ev.activity_task_completed_event_attributes
            name, size_in = scheduled[done.scheduled_event_id]
            sizes[name].append((size_in, done.result.ByteSize()))

    def median(name: str) -> tuple[int, int]:
        found = sizes[name]
        middle = (
            int(statistics.median(i for i, _ in found)),
            int(statistics.median(o for _, o in found)),
        )
        return raw_sizes([middle])[0]

    return TurnShape(turns, CALLS, median(MODEL), median(TOOL))


@dataclass
class Dial:
    """What the durability bench measured, one value per repeat (history figures per run)."""

    runs: int
    turns: int
    ms: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    """Milliseconds per step of one run alone."""
    rate: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    """Steps per second of `runs` concurrent runs."""
    worker_cpu: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    server_cpu: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    ids: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    """Every measured run's workflow id."""
    events: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    """History events per step, one value per run."""
    actions: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    """Temporal Cloud actions per step, one value per run."""
    markers: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    """Local-activity markers per run."""
    load: list[float] = field(default_factory=list)
    """The 1-minute load average before and after."""
    shape: TurnShape | None = None

    @property
    def steps(self) -> int:
        """Steps of one run."""
        return steps_of(self.turns)

    def speedup(self) -> Spread:
        """Steps per second of `turn` over `step`, paired by repeat."""
        return ratio(self.rate[TURN], self.rate[STEP])

    def report(self) -> str:
        """The table, then the ratios."""
        rows = [
            [
                label,
                Spread.of(self.ms[key]).show("{:.2f}"),
                Spread.of(self.rate[key]).show("{:,.0f}"),
                Spread.of(self.events[key]).show("{:.2f}"),
                Spread.of(self.actions[key]).show("{:.2f}"),
                Spread.of(self.worker_cpu[key]).show("{:.2f}"),
                Spread.of(self.server_cpu[key]).show("{:.2f}"),
            ]
            for key, label in LABELS.items()
        ]
        headers = [
            "system",
            "ms per step (1 run)",
            f"steps/s ({self.runs} at once)",
            "history events per step",
            "actions per step",
            "bench process CPU ms/step",
            "server CPU ms/step",
        ]
        pairs = [
            ('throughput, "turn" / "step"', self.rate, TURN, STEP),
            ('throughput, "step" / raw', self.rate, STEP, RAW),
            ('throughput, "turn" / raw', self.rate, TURN, RAW),
            ('ms per step, "turn" / "step"', self.ms, TURN, STEP),
            ('ms per step, "step" / raw', self.ms, STEP, RAW),
        ]
        ratios = [[label, ratio(by[a], by[b]).show("{:.2f}")] for label, by, a, b in pairs]
        per_run = Spread.of(self.markers[TURN]).show("{:.0f}")
        shape = self.shape
        sizes = (
            f"; raw payloads in/out: model {shape.model[0]:,}/{shape.model[1]:,} chars, "
            f"tool {shape.tool[0]:,}/{shape.tool[1]:,}"
            if shape
            else ""
        )
        head = (
            f"**Durability dial**: {self.turns} turns of {CALLS} parallel `read` calls, "
            f"{self.steps} steps a run, {len(self.rate[STEP])} repeats; 1-minute load average "
            f"{self.load[0]:.1f} before, {self.load[-1]:.1f} after"
        )
        foot = (
            f'Runs measured per system: {len(self.ids[STEP])}. "turn" recorded {per_run} '
            f"local-activity markers a run (of {self.turns * CALLS} reads){sizes}. Actions per "
            "step follow Temporal Cloud's rule for history events (`bench.durability.actions`)."
        )
        return "\n".join(
            [
                head,
                "",
                table(headers, rows),
                "",
                table(["ratio", "median (min-max)"], ratios),
                "",
                foot,
            ]
        )


def raw_worker(bench: Env) -> Worker:
    """An in-process worker for the raw-Temporal turns."""
    return Worker(
        bench.raw_client, task_queue=RAW_QUEUE, workflows=[RawTurns], activities=[raw_step]
    )


async def durability(bench: Env, count: int, turns: int, reps: int) -> Dial:
    """`reps` rounds of one run alone and `count` at once, per system in a rotating order."""
    result = Dial(count, turns)
    result.load.append(os.getloadavg()[0])
    agent = reader(turns)
    steps = steps_of(turns)

    async def waypoint(mode: str) -> str:
        workflow_id = new_id(mode)
        handle = await runs.start_run(
            bench.client,
            agent.name,
            "benchmark",
            task_queue=QUEUE,
            workflow_id=workflow_id,
            durability=mode,  # type: ignore[arg-type]
        )
        await handle.result()
        return workflow_id

    async with bench.waypoint_worker([agent], QUEUE), raw_worker(bench):
        warm = await waypoint(STEP)
        shape = result.shape = shape_of(await history.fetch(bench.client, warm), turns)

        async def raw(_: str) -> str:
            workflow_id = new_id(RAW)
            await bench.raw_client.execute_workflow(
                RawTurns.run, shape, id=workflow_id, task_queue=RAW_QUEUE
            )
            return workflow_id

        run: dict[str, Callable[[str], Awaitable[str]]] = {STEP: waypoint, TURN: waypoint, RAW: raw}
        for key in (TURN, RAW):  # warm-up, not counted
            await run[key](key)
        pid = bench.server.process.pid
        order = list(LABELS)
        for rep in range(reps):
            turn = order[rep % 3 :] + order[: rep % 3]
            for key in turn:
                began = time.perf_counter()
                result.ids[key].append(await run[key](key))
                result.ms[key].append((time.perf_counter() - began) * 1000 / steps)
            for key in turn:
                cpu, server = cpu_seconds(), cpu_seconds(pid)
                began = time.perf_counter()
                ids = await asyncio.gather(*(run[key](key) for _ in range(count)))
                seconds = time.perf_counter() - began
                result.rate[key].append(count * steps / seconds)
                result.worker_cpu[key].append((cpu_seconds() - cpu) * 1000 / (count * steps))
                result.server_cpu[key].append((cpu_seconds(pid) - server) * 1000 / (count * steps))
                result.ids[key].extend(ids)
    result.load.append(os.getloadavg()[0])
    for key, ids in result.ids.items():
        client = bench.raw_client if key == RAW else bench.client
        for workflow_id in ids:
            events = await history.fetch(client, workflow_id)
            result.events[key].append(len(events) / steps)
            result.actions[key].append(actions(events) / steps)
            result.markers[key].append(local_markers(events))
    return result


async def main(count: int, turns: int, reps: int) -> None:
    """Run the benchmark on a dev server of its own and print its table."""
    print(
        f"{os.cpu_count()} cores, Python {platform.python_version()}, temporalio "
        f"{temporalio.__version__}, `{temporal_binary().name}` dev server (SQLite); scripted "
        "model with zero latency, no-op tool\n",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="waypoint-bench-") as tmp:
        async with env(Path(tmp) / "durability") as bench:
            dial = await durability(bench, count, turns, reps)
    print(dial.report(), flush=True)
    speedup = dial.speedup()
    verdict = "met" if speedup.median >= TARGET else "missed"
    print(f'\nTarget: "turn" throughput >= {TARGET}x "step": {speedup.show("{:.2f}x")}, {verdict}.')


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=20, help="concurrent runs per round")
    parser.add_argument("--turns", type=int, default=10, help="turns of 8 reads per run")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved rounds")
    args = parser.parse_args()
    asyncio.run(main(args.runs, args.turns, args.repeats))
