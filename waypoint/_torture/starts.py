"""How a scenario's run starts: the input it drew, sent by the client or on the console's form.

A drawn share of scenarios (`Scenario.form_start`) starts its run as a person would, on the
console's start form, signed in with a password and sending the session's CSRF token: the
form carries the task, the id, the limits, the history budget and the durability. Step
timeouts and retries are no person's to choose: they are the console's own
(`Console.start_options`), which the harness sets as whoever serves a console would. The rest
start through the client, so both paths stay covered; `started_as_drawn` then holds either
run's recorded input to what the scenario drew.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from temporalio.client import Client

from waypoint._torture.agent import NAME
from waypoint._torture.operators import TASK
from waypoint._torture.scenario import Scenario
from waypoint.client import runs
from waypoint.protocol import HistoryOverride, LimitsOverride, RunInput, StepOptions

if TYPE_CHECKING:
    from waypoint._torture.console_channel import ConsoleChannel
    from waypoint._torture.evidence import Execution

OPTIONS = StepOptions(
    model_timeout=timedelta(seconds=10),
    model_heartbeat_timeout=timedelta(seconds=3),
    model_max_attempts=3,
    tool_timeout=timedelta(seconds=3),
    tool_heartbeat_timeout=timedelta(seconds=2),
    retry_initial_interval=timedelta(milliseconds=100),
    retry_max_interval=timedelta(milliseconds=500),
)
"""Short timeouts, so a killed worker's steps are retried within seconds; three model
attempts, so a run of 529s parks in `model_unavailable` and needs `resume`."""
NOTICE_OPTIONS = {"notice_max_attempts": 3, "notice_drain": timedelta(seconds=2)}
"""A receiver that is down gives up within a second, and a run's close waits 2 s at most."""
TASK_TIMEOUT = timedelta(seconds=3)
"""A worker killed mid-task delays the run this long."""
DRAWN = (
    "agent",
    "task",
    "limits",
    "limits_override",
    "options",
    "history",
    "history_override",
    "durability",
)
"""What of a run's input the scenario draws, and `started_as_drawn` compares."""


def drawn(scenario: Scenario) -> RunInput:
    """What the scenario's run starts with: its limits, history budget, durability, options."""
    return RunInput(
        agent=NAME,
        task=TASK,
        limits_override=LimitsOverride(
            max_turns=scenario.max_turns or 20, max_cost_usd=scenario.max_cost_usd
        ),
        options=OPTIONS.model_copy(update=NOTICE_OPTIONS) if scenario.notices else OPTIONS,
        history_override=HistoryOverride(
            max_events=scenario.history_events or 2000, keep_recent_turns=2
        ),
        durability="turn" if scenario.turn else None,
    )


async def start(
    client: Client,
    given: RunInput,
    run_id: str,
    task_queue: str,
    *,
    form: bool,
    folder: Path,
    channel: ConsoleChannel | None = None,
) -> None:
    """Start the run: on the start form of `channel`'s console (one of its own if none), or not.

    A console opened here serves the start alone; a `console` scenario's decides through its own.
    """
    if not form:
        await client.start_workflow(
            runs.WORKFLOW, given, id=run_id, task_queue=task_queue, task_timeout=TASK_TIMEOUT
        )
        return
    from waypoint._torture.console_channel import ConsoleChannel  # authlib: cryptography

    opened = channel is None
    if channel is None:
        channel = ConsoleChannel()
        await channel.open(client, folder, task_queue, False, **console(given))
    try:
        await channel.start(run_id, given)
    finally:
        if opened:
            await channel.close()


def console(given: RunInput) -> dict[str, Any]:
    """The settings of a console whose starts give runs `given`'s step options, as drawn."""
    return {"start_options": given.options, "start_task_timeout": TASK_TIMEOUT}


def started_as_drawn(run: str, given: RunInput, executions: list[Execution]) -> list[str]:
    """`started_as_drawn`: the run's first execution began with the input the scenario drew.

    Its agent, task, limits, step options, history budget and durability, whether the client
    or the console's start form started it (a rerun's chain and continue-as-new aside).
    """
    firsts = [e for e in executions if e.workflow_id == run and e.run_id == e.chain and e.input]
    if not firsts:
        return [f"started_as_drawn: no history of {run} shows how it started"]
    began = min(firsts, key=lambda e: e.start).input
    assert began is not None
    return [
        f"started_as_drawn: {run} began with {name} {getattr(began, name)!r}, the scenario drew "
        f"{getattr(given, name)!r}"
        for name in DRAWN
        if getattr(began, name) != getattr(given, name)
    ]
