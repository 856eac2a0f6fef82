"""Waypoint's tuned dev server against Temporal's default dynamic config, per step."""

from __future__ import annotations

from pathlib import Path

from bench.harness import env
from bench.per_step import RAW, WAYPOINT, PerStep, per_step
from bench.stats import Spread, table
from waypoint._operations.dev_server import DYNAMIC_CONFIG


async def default_config(work: Path, steps: int, reps: int) -> PerStep:
    """(a) and (b) per step on a dev server without Waypoint's dynamic config."""
    async with env(work, tuned=False) as default:
        return await per_step(default, steps, reps, systems=(WAYPOINT, RAW))


def report(tuned: PerStep, default: PerStep) -> str:
    """Milliseconds per step on each server, and what the tuning saves."""
    tuning = ", ".join(f"`{k}={v}`" for k, v in DYNAMIC_CONFIG.items())
    rows = [
        [
            label,
            Spread.of(default.ms[key]).show("{:.2f}"),
            Spread.of(tuned.ms[key]).show("{:.2f}"),
        ]
        for key, label in ((WAYPOINT, "(a) Waypoint"), (RAW, "(b) raw Temporal"))
    ]
    head = f"**Dev server config**: ms per step, Temporal's defaults vs Waypoint's {tuning}"
    return "\n".join([head, "", table(["system", "default config", "tuned (above)"], rows)])
