"""The kill test's verdict: the result as you compare it, the ledger, and each effect counted.

Every violation names what it is about: the step, the kill point nearest to it (in flight at
it, or the first to come before the step ran), and, for a result, the field that differs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from pydantic import BaseModel
from temporalio.client import Client

from waypoint.protocol import RunResult, StepRecord
from waypoint.testing.report import Kill, KillReport

Compare = Callable[[RunResult], Any] | Sequence[str] | None
"""How two runs' results are compared: None, the whole result (output, stop reason, turns); a
list of fields of the typed result (`"trip.hold_id"` reaches into a nested one); or a function
of the `RunResult` whose values must be equal (`lambda r: r.output_as(Trip).destination`)."""


def shape(result: RunResult) -> list[tuple[str, str, str | None, str]]:
    """Each ledger line as compared: step, kind, tool and how it ended."""
    return [(r.step_id, r.kind, r.tool, r.status) for r in result.ledger]


def first_difference(ref: RunResult, got: RunResult) -> str:
    """The first ledger line where the runs part, both sides shown; '' when they match."""
    want, have = shape(ref), shape(got)
    for i, (a, b) in enumerate(zip(want, have, strict=False)):
        if a != b:
            return f"ledger differs at line {i + 1}: {_line(b)} vs {_line(a)} uninterrupted"
    if len(want) != len(have):
        i = min(len(want), len(have))
        extra = have[i] if len(have) > i else want[i]
        side = "only the killed run" if len(have) > i else "only the uninterrupted run"
        return (
            f"ledger differs at line {i + 1}: {side} has {_line(extra)} "
            f"({len(have)} lines vs {len(want)})"
        )
    return ""


def _line(shape: tuple[str, str, str | None, str]) -> str:
    step, _, _, status = shape
    return f"{step} {status}"


def near(kills: Sequence[Kill], step_id: str) -> str:
    """The kill point nearest to a step: the one it was in flight at, else the last before it."""
    for i, k in enumerate(kills, start=1):
        if step_id in k.in_flight:
            return f"in flight at kill {i} ({k.label})"
    before = [i for i, k in enumerate(kills, start=1) if step_id not in k.completed]
    if not kills:
        return "with no kill"
    if not before:
        return f"done before kill 1 ({kills[0].label})"
    i = max(before)
    return f"after kill {i} ({kills[i - 1].label})"


def _plain(value: Any) -> Any:
    return value.model_dump(mode="json") if isinstance(value, BaseModel) else value


def field_difference(want: Any, got: Any, at: str = "") -> tuple[str, Any, Any] | None:
    """The first field where two JSON-like values part: (path, got, want); None when equal."""
    want, got = _plain(want), _plain(got)
    if isinstance(want, dict) and isinstance(got, dict):
        for key in [*want, *(k for k in got if k not in want)]:
            if key not in want or key not in got:
                return f"{at}{key}", got.get(key, "(missing)"), want.get(key, "(missing)")
            found = field_difference(want[key], got[key], f"{at}{key}.")
            if found is not None:
                return found
        return None
    if isinstance(want, list) and isinstance(got, list) and len(want) == len(got):
        for i, (a, b) in enumerate(zip(want, got, strict=True)):
            found = field_difference(a, b, f"{at}{i}.")
            if found is not None:
                return found
        return None
    return None if want == got else (at.rstrip(".") or "(the value)", got, want)


def _field(result: RunResult, path: str) -> Any:
    if result.output_json is None:
        raise ValueError(
            f"compare by fields ({path!r}) reads the typed result, and run of {result.agent!r} "
            "has none (no output_type): compare with a function of the result instead"
        )
    value: Any = result.output_json
    for part in path.split("."):
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            raise ValueError(f"compare field {path!r}: the typed result has no {part!r} there")
    return value


def compared(result: RunResult, compare: Compare) -> Any:
    """What of `result` must be the same in both runs."""
    if compare is None:
        whole = result.output_json if result.output_json is not None else result.output
        return {"output": whole, "stop_reason": result.stop_reason, "turns": result.turns}
    if callable(compare):
        return compare(result)
    return {path: _field(result, path) for path in compare}


def result_difference(ref: RunResult, got: RunResult, compare: Compare, kills: str) -> str:
    """'result differs in field F: X vs Y uninterrupted (KILLS)'; '' when they match."""
    try:
        found = field_difference(compared(ref, compare), compared(got, compare))
    except Exception as err:  # a compare that cannot be applied is a failed test, said
        return f"result cannot be compared: {type(err).__name__}: {err}"
    if found is None:
        return ""
    path, have, want = found
    return f"result differs in field {path}: {have!r} vs {want!r} uninterrupted ({kills})"


def judge(report: KillReport, local: set[str], compare: Compare) -> None:
    """Local activities (pure tools) may re-run after a crash; they are cheap and pure."""
    ref, got, kills = report.reference, report.result, report.kills
    labels = ", ".join(f"kill {i} ({k.label})" for i, k in enumerate(kills, 1)) or "no kill"
    if differs := result_difference(ref, got, compare, labels):
        report.violations.append(differs)
    if differs := first_difference(ref, got):
        step = differs.split(": ", 1)[1].split(" ")[0]
        report.violations.append(f"{differs}; {step} ran {near(kills, step)}")
    for k in kills:
        if k.exit_code not in (None, 0):
            report.violations.append(f"{k.label}: the worker exited {k.exit_code} after draining")
    for step_id, n in report.executions.items():
        tries = report.attempts[step_id]
        if step_id in local or len(set(tries)) == len(tries):
            continue  # each start a retry of the last: Temporal's own, after a kill or a timeout
        where = near(kills, step_id)
        report.violations.append(f"{step_id} ran {n} times as attempts {tries}: {where}")


async def effect_counts(
    client: Client, ledger: list[StepRecord], count_effects: Callable[[str], int], within: str = ""
) -> dict[str, tuple[int, StepRecord]]:
    """What the downstream saw of every effect step, whatever its ledger line says.

    A sub-agent's step is counted by its child run's effects (`step > child step`).
    """
    counts: dict[str, tuple[int, StepRecord]] = {}
    for r in ledger:
        if not r.effect_key:
            continue
        where = f"{within}{r.step_id}"
        if r.child_workflow_id:
            child = client.get_workflow_handle(
                r.child_workflow_id, run_id=r.child_run_id, result_type=RunResult
            )
            done = await child.result()
            counts |= await effect_counts(client, done.ledger, count_effects, f"{where} > ")
            continue
        counts[where] = (count_effects(r.effect_key), r)
    return counts


async def count(client: Client, report: KillReport, count_effects: Callable[[str], int]) -> None:
    """Each effect at most once, a completed one exactly once, as often as uninterrupted."""
    got = await effect_counts(client, report.result.ledger, count_effects)
    ref = await effect_counts(client, report.reference.ledger, count_effects)
    report.reference_effect_counts = {step: n for step, (n, _) in ref.items()}
    for step, (n, r) in got.items():
        report.effect_counts[step] = n
        said = f"{step}: effect happened {n} times ({r.effect_key}, ledger {r.status}"
        where = near(report.kills, step.split(" > ")[0])
        if n > 1 or (r.status == "completed" and n != 1):
            report.violations.append(f"{said}), {where}")
        elif step in ref and ref[step][0] != n:
            report.violations.append(f"{said}; {ref[step][0]} uninterrupted), {where}")
