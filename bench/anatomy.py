"""Where a step's time goes: the histories of the last per-step runs, side by side."""

from __future__ import annotations

import statistics

from bench import history
from bench.harness import Env
from bench.per_step import PURE, RAW, WAYPOINT, PerStep
from bench.stats import Spread, table

COLUMNS = ((WAYPOINT, "(a) Waypoint"), (RAW, "(b) raw Temporal"), (PURE, "(e) Waypoint pure"))


async def histories(env: Env, result: PerStep) -> dict[str, list]:
    """The last run's history of each Temporal system."""
    found = {}
    for key, _ in COLUMNS:
        client = env.raw_client if key == RAW else env.client
        found[key] = await history.fetch(client, result.runs[key])
    return found


def shapes_of(events: dict[str, list], result: PerStep) -> dict[str, history.Anatomy]:
    """What a step costs in each system's history."""
    return {key: history.anatomy(found, result.steps) for key, found in events.items()}


def where_time_goes(events: dict[str, list], result: PerStep) -> str:
    """Events, workflow tasks, bytes and phase medians per step, from each system's history."""
    shapes = shapes_of(events, result)
    phases = {key: history.timeline(found) for key, found in events.items()}

    def row(label: str, value) -> list[str]:
        return [label, *(value(key) for key, _ in COLUMNS)]

    rows = [
        row("history events per step", lambda k: f"{shapes[k].per_step(shapes[k].events):.2f}"),
        row(
            "workflow tasks per step",
            lambda k: f"{shapes[k].per_step(shapes[k].workflow_tasks):.2f}",
        ),
        row(
            "search-attribute upserts per step",
            lambda k: f"{shapes[k].per_step(shapes[k].upserts):.2f}",
        ),
        row(
            "local-activity markers per step",
            lambda k: f"{shapes[k].per_step(shapes[k].markers):.2f}",
        ),
        row(
            "history bytes per step",
            lambda k: f"{shapes[k].per_step(shapes[k].history_bytes):,.0f}",
        ),
        row(
            "activity input / result bytes (mean)",
            lambda k: f"{shapes[k].input_bytes:,.0f} / {shapes[k].result_bytes:,.0f}",
        ),
    ]
    for phase in history.PHASES:
        rows.append(
            row(
                f"ms {phase}, median",
                lambda k, p=phase: (
                    f"{statistics.median(phases[k][p]):.2f}" if phases[k][p] else "-"
                ),
            )
        )
    rows.append(
        row("bench process CPU ms per step", lambda k: Spread.of(result.worker_cpu[k]).show())
    )
    rows.append(row("server CPU ms per step", lambda k: Spread.of(result.server_cpu[k]).show()))
    head = "**Where the time goes** (histories of the last runs above; server event times)"
    return "\n".join([head, "", table(["per step", *(label for _, label in COLUMNS)], rows)])
