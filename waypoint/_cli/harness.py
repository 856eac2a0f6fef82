"""The proving commands: `killtest` (kill a worker mid-run and count) and `torture` (seeded).

Both take your own agents (`--app`), answers for your client-answered tools (`--answer`), and
say which timeouts they impose; `killtest` also runs the examples (`--example`).
"""

from __future__ import annotations

import importlib
import json
import os
import random
import sys
import tempfile
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any

import typer

from waypoint._cli import render as out
from waypoint._cli.app import app
from waypoint._cli.common import client, command, opt
from waypoint.errors import WaypointError
from waypoint.protocol import StepOptions

DEMO = "vendor_onboarding"
EXAMPLES = {DEMO: "waypoint.demo.killtest", "procurement": "examples.procurement.killtest"}
"""The module with an `example(folder)` for each `waypoint killtest --example NAME`: the demo's
ships in the package, the others' in the repository's `examples/`."""

App = Annotated[
    str | None, typer.Option("--app", help="Your agents, `module:attribute`, as for `worker`.")
]
AgentName = Annotated[str | None, typer.Option("--agent", help="The agent to run.")]
Task = Annotated[str | None, typer.Option("--task", help="The task each run gets.")]
CountEffects = Annotated[
    str | None,
    typer.Option(
        "--count-effects",
        help="`module:function` taking an effect key and returning how many times your "
        "downstream saw it (a sub-agent's effects are asked under their own keys).",
    ),
]
Answers = Annotated[
    list[str] | None,
    typer.Option(
        "--answer",
        help="TOOL=JSON: the result a client-answered tool's question gets (repeatable); a "
        "question with none stops the test at once.",
        metavar="TOOL=JSON",
    ),
]
ToolTimeout = Annotated[
    float | None,
    typer.Option(
        "--tool-timeout",
        help="Seconds a tool's try may take (default 2, kept short so a killed worker's "
        "step moves on quickly); raise it for a slow tool, e.g. an MCP server's first call.",
        metavar="SECONDS",
    ),
]

Compared = Annotated[
    str | None,
    typer.Option(
        "--compare",
        help="What of the results must match: fields of the typed result, `a,b.c`, or "
        "`module:function` of the RunResult (default: the whole result).",
        metavar="FIELDS|MODULE:FUNCTION",
    ),
]
Decided = Annotated[
    str,
    typer.Option(
        "--approvals",
        help="How each approval is decided, in both runs: approve, reject, or "
        "`module:function` taking the pending call and returning True to approve.",
        metavar="approve|reject|MODULE:FUNCTION",
    ),
]
ToolOptionsGiven = Annotated[
    list[str] | None,
    typer.Option(
        "--tool-option",
        help="TOOL.OPTION=VALUE over a tool's own for both runs (repeatable), e.g. "
        "fares.fresh_for=1 or policy.timeout=30 (seconds).",
        metavar="TOOL.OPTION=VALUE",
    ),
]


def parse_tool_options(given: list[str] | None) -> dict[str, dict[str, Any]]:
    """`--tool-option TOOL.OPTION=VALUE` options as `tool_options` by tool name."""
    from waypoint.protocol import ToolOverride

    found: dict[str, dict[str, Any]] = {}
    known = ", ".join(ToolOverride.model_fields)
    for item in given or []:
        target, _, value = item.partition("=")
        tool, _, name = target.rpartition(".")
        if not (tool and value) or name not in ToolOverride.model_fields:
            raise WaypointError(f"--tool-option {item!r}: write TOOL.OPTION=VALUE ({known})")
        try:
            found.setdefault(tool, {})[name] = int(value) if value.isdigit() else float(value)
        except ValueError:
            raise WaypointError(f"--tool-option {item!r}: give a number (seconds)") from None
    try:
        for options in found.values():
            ToolOverride.model_validate(options)  # seconds for a duration, a count for attempts
    except ValueError as err:
        raise WaypointError(f"--tool-option: {err}") from None
    return found


def function_of(flag: str, spec: str) -> Callable[..., Any]:
    """A user's `module:function` named by `flag`."""
    module, _, name = spec.partition(":")
    if not name:
        raise WaypointError(f"{flag} {spec!r}: write it as module:function")
    found = getattr(import_from_here(module), name, None)
    if not callable(found):
        raise WaypointError(f"{flag} {spec!r}: {module} has no function {name}")
    return found


def comparison(given: str | None) -> Any:
    """`--compare`: None (the whole result), fields, or a function."""
    if given is None:
        return None
    if ":" in given:
        return function_of("--compare", given)
    return [f.strip() for f in given.split(",") if f.strip()]


def approval_rule(given: str) -> Any:
    """`--approvals`: approve, reject, or a function of the pending call."""
    return given if given in ("approve", "reject") else function_of("--approvals", given)


def parse_answers(given: list[str] | None) -> dict[str, dict[str, Any]]:
    """`--answer TOOL=JSON` options as the harness's answers by tool name."""
    answers: dict[str, dict[str, Any]] = {}
    for item in given or []:
        tool, sep, text = item.partition("=")
        try:
            result = json.loads(text) if sep and tool else None
        except json.JSONDecodeError as err:
            raise WaypointError(f"--answer {item!r}: the JSON does not parse ({err})") from None
        if not isinstance(result, dict):
            raise WaypointError(f"--answer {item!r}: write it as TOOL='{{...}}', a JSON object")
        answers[tool.strip()] = result
    return answers


def harness_options(tool_timeout: float | None) -> StepOptions:
    """The kill test's short timeouts, with the tool's raised when asked."""
    from waypoint.testing import KILL_TEST_OPTIONS

    if tool_timeout is None:
        return KILL_TEST_OPTIONS
    if not 0 < tool_timeout <= 24 * 3600:
        raise WaypointError(f"--tool-timeout {tool_timeout:g}: give seconds above 0")
    return KILL_TEST_OPTIONS.model_copy(update={"tool_timeout": timedelta(seconds=tool_timeout)})


def import_from_here(module: str) -> Any:
    """Import `module` with the current directory on the path, as `worker --app` does."""
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    return importlib.import_module(module)


def counter(spec: str) -> Callable[[str], int]:
    """The user's `--count-effects module:function`."""
    return function_of("--count-effects", spec)


def example_module(name: str) -> Any:
    """The killtest module of `--example NAME`; one outside a clone is a one-line error."""
    module = EXAMPLES[name]
    try:
        return import_from_here(module)
    except ModuleNotFoundError as err:
        if err.name is None or not module.startswith(err.name):
            raise
        raise WaypointError(
            f"--example {name}: {module} is not importable here; the examples live in the "
            "repository's examples/ folder, so run this from a clone's root"
        ) from None


def own_agent(
    app_path: str | None, agent: str | None, task: str | None, count: str | None
) -> tuple[str, str, str, Callable[[str], int]]:
    """`--app`, `--agent`, `--task`, `--count-effects`: all four, or a one-line error."""
    given = {"--app": app_path, "--agent": agent, "--task": task, "--count-effects": count}
    missing = [flag for flag, value in given.items() if not value]
    if missing:
        raise WaypointError(f"your own agent needs {', '.join(missing)} as well")
    return str(app_path), str(agent), str(task), counter(str(count))


@app.command()
@command
async def killtest(
    kills: Annotated[int, opt("How many times to SIGKILL the worker.", "N")] = 5,
    seed: Annotated[int, opt("Seed for the random kill moments.", "N")] = 1,
    example: Annotated[
        str | None, opt(f"Which example to run: {', '.join(EXAMPLES)}.", "NAME")
    ] = None,
    app_path: App = None,
    agent: AgentName = None,
    task: Task = None,
    count_effects: CountEffects = None,
    answer: Answers = None,
    tool_timeout: ToolTimeout = None,
    compare: Compared = None,
    approvals: Decided = "approve",
    tool_option: ToolOptionsGiven = None,
) -> None:
    """Prove it: run an agent (an example, or yours) while SIGKILLing its worker, then count."""
    from waypoint.testing import KillPoint, run_kill_test

    answers = parse_answers(answer)
    options = harness_options(tool_timeout)
    tool_options = parse_tool_options(tool_option)
    compared, rule = comparison(compare), approval_rule(approvals)
    yours = app_path or agent or task or count_effects
    if yours and example:
        raise WaypointError("--example runs an example; --app ... runs your agent: choose one")
    if not yours and (example or DEMO) not in EXAMPLES:
        raise WaypointError(f"--example {example!r}: choose one of {', '.join(EXAMPLES)}")
    mine = own_agent(app_path, agent, task, count_effects) if yours else None
    chosen: Any = None if yours else example_module(example or DEMO)  # fails before connecting
    c = await client()
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory(prefix="waypoint-killtest-") as tmp:
        env = {"PYTHONPATH": os.getcwd()}
        if mine is None:
            picked = chosen.example(Path(tmp) / "downstream")
            mine = (picked.app, picked.agent, picked.task, picked.count_effects)
            env.update(picked.env, WAYPOINT_SCRIPTED_LATENCY="0.3")
            answers = {**picked.answers, **answers}
        report = await run_kill_test(
            c,
            app=mine[0],
            agent=mine[1],
            task=mine[2],
            task_queue=f"killtest-{seed}-{rng.randrange(10**6)}",
            workdir=Path(tmp),
            kill_points=[KillPoint.after_seconds(rng.uniform(0.05, 1.2)) for _ in range(kills)],
            count_effects=mine[3],
            env=env,
            timeout=120,
            answers=answers,
            options=options,
            compare=compared,
            approvals=rule,
            tool_options=tool_options,
        )
    out.console.print(report.summary())
    if not report.ok:
        raise typer.Exit(1)


@app.command()
@command
async def torture(
    app_path: App = None,
    agent: AgentName = None,
    task: Task = None,
    count_effects: CountEffects = None,
    seeds: Annotated[str, opt("Seeds, `A..B` (both included).")] = "1..3",
    kills: Annotated[int, opt("Worker stops per seed, about one in three a SIGTERM.", "N")] = 3,
    answer: Answers = None,
    tool_timeout: ToolTimeout = None,
) -> None:
    """Torture your own agent: seeded worker SIGKILLs and SIGTERMs, every invariant checked."""
    from waypoint._torture.custom import torture_agent
    from waypoint.testing.report import imposed

    answers = parse_answers(answer)
    options = harness_options(tool_timeout)
    app_name, name, given, count = own_agent(app_path, agent, task, count_effects)
    first, _, last = seeds.partition("..")
    if not (first.isdigit() and (last or first).isdigit()):
        raise WaypointError(f"--seeds {seeds!r}: write one seed or A..B, e.g. 1..5")
    c = await client()
    out.console.print(imposed(options))
    failed = 0
    for seed in range(int(first), int(last or first) + 1):
        with tempfile.TemporaryDirectory(prefix="waypoint-torture-") as tmp:
            report, violations = await torture_agent(
                c,
                app=app_name,
                agent=name,
                task=given,
                seed=seed,
                workdir=Path(tmp),
                count_effects=count,
                env={"PYTHONPATH": os.getcwd()},
                kills=kills,
                answers=answers,
                options=options,
            )
        verdict = "OK" if not violations else "FAILED"
        out.console.print(f"seed {seed}: {verdict}, {len(report.kills)} stops")
        for line in report.summary(timeouts=False).splitlines()[1:]:  # kills, re-runs, effects
            out.console.print(line)
        for v in violations[len(report.violations) :]:
            out.console.print(f"  VIOLATION {v}")
        failed += bool(violations)
    if failed:
        raise typer.Exit(1)
