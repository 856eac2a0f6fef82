"""Commands to stop, branch and tidy runs: cancel, terminate, fork, gc, killtest, torture."""

from __future__ import annotations

import os
import re
from datetime import timedelta
from pathlib import Path
from typing import Annotated

import typer

from waypoint.cli import render as out
from waypoint.cli.app import app
from waypoint.cli.common import Run, client, command, open_run
from waypoint.cli.runs import print_started
from waypoint.client import runs
from waypoint.errors import WaypointError
from waypoint.settings import Settings

UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_age(text: str) -> timedelta:
    """`7d`, `12h`, `30m`: a retention period."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*", text)
    if not match:
        raise WaypointError(f"--older-than {text!r}: use a number and a unit, e.g. 7d, 12h, 30m")
    return timedelta(**{UNITS[match.group(2)]: float(match.group(1))})


@app.command()
@command
async def cancel(run: Run) -> None:
    """Cancel a run: running steps stop (effects first report what they did); it ends cancelled."""
    c = await client()
    await open_run(c, run, "cancel")
    await runs.handle(c, run).cancel()
    out.console.print(f"cancellation requested for {run}")


@app.command()
@command
async def terminate(
    run: Run,
    reason: Annotated[str, typer.Option(help="Why; shown in the Web UI.")],
) -> None:
    """Stop a run at once, without cleanup (prefer `cancel`)."""
    c = await client()
    await open_run(c, run, "terminate")
    await runs.handle(c, run).terminate(reason=reason)
    out.console.print(f"terminated {run}: {reason}")


@app.command()
@command
async def fork(
    run: Run,
    after_turn: Annotated[
        int, typer.Option(help="Reuse everything up to the end of this turn.", metavar="N")
    ],
    note: Annotated[str | None, typer.Option(help="A note for the model in the new run.")] = None,
    run_id: Annotated[str | None, typer.Option("--id", help="Workflow id of the fork.")] = None,
) -> None:
    """Start a new run from a finished turn of RUN; nothing before that point runs again."""
    settings = Settings.from_env()
    handle = await runs.fork(
        await client(),
        run,
        after_turn,
        task_queue=settings.task_queue,
        note=note,
        workflow_id=run_id,
    )
    print_started(settings, handle.id)


@app.command()
@command
async def gc(
    older_than: Annotated[
        str, typer.Option(help="Keep blobs younger than this (e.g. 7d, 12h).")
    ] = "7d",
) -> None:
    """Delete stored payload and transcript blobs that no open run references."""
    from waypoint.settings import payload_store, transcript_store
    from waypoint.stores.gc import collect_garbage

    age = parse_age(older_than)
    settings = Settings.from_env()
    results = await collect_garbage(
        await client(), payload_store(settings), transcript_store(settings), age
    )
    for store, r in results.items():
        out.console.print(
            f"{store}: deleted {r.deleted} ({r.freed_bytes:,} bytes), "
            f"kept {r.kept} ({r.kept_bytes:,} bytes)"
        )
    if not results:
        out.console.print("no stores to collect (WAYPOINT_PAYLOAD_STORE=off)")


EXAMPLES = ("vendor_onboarding", "procurement")
"""Examples with a `killtest.example(folder)` for `waypoint killtest --example`."""


@app.command()
@command
async def killtest(
    kills: Annotated[
        int, typer.Option(help="How many times to SIGKILL the worker.", metavar="N")
    ] = 5,
    seed: Annotated[int, typer.Option(help="Seed for the random kill moments.", metavar="N")] = 1,
    example: Annotated[
        str, typer.Option(help=f"Which example to run: {', '.join(EXAMPLES)}.", metavar="NAME")
    ] = EXAMPLES[0],
) -> None:
    """Prove it: run an example while SIGKILLing its worker at random moments, then count."""
    import importlib
    import random
    import tempfile

    from waypoint.testing import KillPoint, run_kill_test

    if example not in EXAMPLES:
        raise WaypointError(f"--example {example!r}: choose one of {', '.join(EXAMPLES)}")
    c = await client()
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory(prefix="waypoint-killtest-") as tmp:
        chosen = importlib.import_module(f"examples.{example}.killtest").example(
            Path(tmp) / "downstream"
        )
        report = await run_kill_test(
            c,
            app=chosen.app,
            agent=chosen.agent,
            task=chosen.task,
            task_queue=f"killtest-{seed}-{rng.randrange(10**6)}",
            workdir=Path(tmp),
            kill_points=[KillPoint.after_seconds(rng.uniform(0.05, 1.2)) for _ in range(kills)],
            count_effects=chosen.count_effects,
            env={
                **chosen.env,
                "WAYPOINT_SCRIPTED_LATENCY": "0.3",
                "PYTHONPATH": os.getcwd(),
            },
            timeout=120,
            answers=chosen.answers,
        )
    out.console.print(report.summary())
    if not report.ok:
        raise typer.Exit(1)


@app.command()
@command
async def torture(
    app_path: Annotated[
        str, typer.Option("--app", help="Your agents, `module:attribute`, as for `worker`.")
    ],
    agent: Annotated[str, typer.Option(help="The agent to run.")],
    task: Annotated[str, typer.Option(help="The task each run gets.")],
    count_effects: Annotated[
        str,
        typer.Option(
            help="`module:function` taking an effect key and returning how many times your "
            "downstream saw it."
        ),
    ],
    seeds: Annotated[str, typer.Option(help="Seeds, `A..B` (both included).")] = "1..3",
    kills: Annotated[
        int,
        typer.Option(help="Worker stops per seed, about one in three a SIGTERM.", metavar="N"),
    ] = 3,
) -> None:
    """Torture your own agent: seeded worker SIGKILLs and SIGTERMs, every invariant checked."""
    import importlib
    import tempfile

    from waypoint.torture.custom import torture_agent

    module, _, name = count_effects.partition(":")
    if not name:
        raise WaypointError(f"--count-effects {count_effects!r}: write it as module:function")
    counter = getattr(importlib.import_module(module), name)
    first, _, last = seeds.partition("..")
    c = await client()
    failed = 0
    for seed in range(int(first), int(last or first) + 1):
        with tempfile.TemporaryDirectory(prefix="waypoint-torture-") as tmp:
            report, violations = await torture_agent(
                c,
                app=app_path,
                agent=agent,
                task=task,
                seed=seed,
                workdir=Path(tmp),
                count_effects=counter,
                env={"PYTHONPATH": os.getcwd()},
                kills=kills,
            )
        verdict = "OK" if not violations else "FAILED"
        out.console.print(f"seed {seed}: {verdict}, {len(report.kills)} stops")
        for k in report.kills:
            out.console.print(f"  {k.label}: in flight {sorted(k.in_flight) or 'nothing'}")
        for v in violations:
            out.console.print(f"  VIOLATION {v}")
        failed += bool(violations)
    if failed:
        raise typer.Exit(1)
