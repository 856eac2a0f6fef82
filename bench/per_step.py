"""Per-step overhead: the same N-step loop on Waypoint, raw Temporal, plain SQLite and LangGraph.

Every repetition runs each system once, in a rotating order, so drift on a noisy machine hits
them all. Waypoint's payload sizes are read from its own history and given to the baselines.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from bench import history, langgraph_loop
from bench.agents import stepper, stepper_name
from bench.floor import sqlite_floor
from bench.harness import Env, raw_sizes, time_raw, time_waypoint
from bench.procs import cpu_seconds
from bench.stats import Spread, ratio, table

WAYPOINT, RAW, FLOOR, LANGGRAPH, PURE, PURE_MANY = "a", "b", "c", "d", "e", "e+"
CALLS = 5
"""`pure` calls per turn in the run that measures what one more call costs."""
LABELS = {
    WAYPOINT: "(a) Waypoint, `read` tool (activity)",
    RAW: "(b) raw Temporal, one activity per step",
    FLOOR: "(c) plain Python, one fsync'd SQLite row per step",
    LANGGRAPH: "(d) LangGraph, SQLite checkpointer, durability sync",
    PURE: "(e) Waypoint, `pure` tool (activity on the agent's queue)",
}
QUEUE, RAW_QUEUE = "per-step", "per-step-raw"


@dataclass
class PerStep:
    """Milliseconds per step of each system, one value per repetition, and where they came from."""

    steps: int
    ms: dict[str, list[float]] = field(default_factory=dict)
    worker_cpu: dict[str, list[float]] = field(default_factory=dict)
    server_cpu: dict[str, list[float]] = field(default_factory=dict)
    runs: dict[str, str] = field(default_factory=dict)
    """The last workflow id of each Temporal system, for the history anatomy."""
    note: str = ""

    def add(self, system: str, ms: float, worker: float, server: float) -> None:
        """Record one repetition."""
        self.ms.setdefault(system, []).append(ms)
        self.worker_cpu.setdefault(system, []).append(worker)
        self.server_cpu.setdefault(system, []).append(server)

    def pure_marginal(self) -> Spread:
        """Milliseconds one more `pure` call adds to a turn, paired by repetition."""
        extra = (CALLS - 1) * (self.steps // 2 - 1)
        return Spread.of(
            [
                (many * (self.steps + extra) - one * self.steps) / extra
                for one, many in zip(self.ms[PURE], self.ms[PURE_MANY], strict=True)
            ]
        )

    def report(self) -> str:
        """The per-step table, then the ratios."""
        rows = []
        for key, label in LABELS.items():
            if key not in self.ms:
                continue
            temporal = key in (WAYPOINT, RAW, PURE)
            rows.append(
                [
                    label,
                    Spread.of(self.ms[key]).show("{:.2f}"),
                    Spread.of(self.worker_cpu[key]).show(),
                    Spread.of(self.server_cpu[key]).show() if temporal else "-",
                ]
            )
        if PURE_MANY in self.ms:
            label = f"(e) one more `pure` call in a turn (marginal, from {CALLS} calls a turn)"
            rows.append([label, self.pure_marginal().show("{:.2f}"), "", ""])
        head = (
            f"**Per-step overhead**: {self.steps} steps per run, {len(self.ms[WAYPOINT])} runs each"
        )
        out = [
            head,
            "",
            table(
                ["system", "ms per step", "bench process CPU ms/step", "server CPU ms/step"], rows
            ),
            "",
        ]
        pairs = [
            ("a / b (Waypoint vs raw Temporal)", WAYPOINT, RAW),
            ("a / c (Waypoint vs SQLite floor)", WAYPOINT, FLOOR),
            ("a / d (Waypoint vs LangGraph)", WAYPOINT, LANGGRAPH),
            ("e / b (Waypoint pure vs raw Temporal)", PURE, RAW),
        ]
        ratios = [
            [label, ratio(self.ms[x], self.ms[y]).show("{:.2f}")]
            for label, x, y in pairs
            if x in self.ms and y in self.ms
        ]
        out.append(table(["ratio", "median (min-max)"], ratios))
        if self.note:
            out += ["", self.note]
        return "\n".join(out)


async def _measured(
    result: PerStep, system: str, steps: int, server_pid: int, run: Callable[[], Awaitable[float]]
) -> None:
    cpu, server = cpu_seconds(), cpu_seconds(server_pid)
    seconds = await run()
    worker_ms = (cpu_seconds() - cpu) * 1000 / steps
    server_ms = (cpu_seconds(server_pid) - server) * 1000 / steps
    result.add(system, seconds * 1000 / steps, worker_ms, server_ms)


ALL = (WAYPOINT, RAW, PURE, PURE_MANY, FLOOR, LANGGRAPH)


async def per_step(env: Env, steps: int, reps: int, systems: tuple[str, ...] = ALL) -> PerStep:
    """Run each of `systems` `reps` times, interleaved, after one warm-up run each."""
    result = PerStep(steps)
    if LANGGRAPH in systems and not langgraph_loop.available():
        result.note = (
            "(d) skipped: LangGraph is not installed "
            "(`pip install langgraph langgraph-checkpoint-sqlite`)."
        )
    agents = [stepper(steps), stepper(steps, pure=True), stepper(steps, pure=True, calls=CALLS)]
    names = {
        WAYPOINT: stepper_name(steps),
        PURE: stepper_name(steps, pure=True),
        PURE_MANY: stepper_name(steps, pure=True, calls=CALLS),
    }
    pid = env.server.process.pid
    async with env.waypoint_worker(agents, QUEUE), env.raw_worker(RAW_QUEUE):
        _, warm = await time_waypoint(env.client, names[WAYPOINT], QUEUE)
        sizes = raw_sizes(history.activity_sizes(await history.fetch(env.client, warm)))
        db = env.work / "floor.db"
        graph_db = env.work / "langgraph.db"

        async def waypoint(key: str) -> float:
            seconds, result.runs[key] = await time_waypoint(env.client, names[key], QUEUE)
            return seconds

        async def raw() -> float:
            seconds, result.runs[RAW] = await time_raw(env.raw_client, sizes, RAW_QUEUE)
            return seconds

        plan: list[tuple[str, int, Callable[[], Awaitable[float]]]] = [
            (WAYPOINT, steps, lambda: waypoint(WAYPOINT)),
            (RAW, steps, raw),
            (PURE, steps, lambda: waypoint(PURE)),
            (PURE_MANY, steps + (CALLS - 1) * (steps // 2 - 1), lambda: waypoint(PURE_MANY)),
            (FLOOR, steps, lambda: asyncio.to_thread(sqlite_floor, db, sizes)),
        ]
        if not result.note:
            plan.append(
                (
                    LANGGRAPH,
                    steps,
                    lambda: asyncio.to_thread(langgraph_loop.langgraph_run, graph_db, sizes),
                )
            )
        plan = [entry for entry in plan if entry[0] in systems]
        for _, _, run in plan:  # warm-up, not counted
            await run()
        for rep in range(reps):
            turn = rep % len(plan)
            for system, n, run in plan[turn:] + plan[:turn]:
                await _measured(result, system, n, pid, run)
    return result
