"""The spend invariants: `billing`, `cancelled_spend`, `fork_billing` and `budget`.

Kept apart from `invariants` (which would pass 400 lines with them) because they share one
question, what was spent and by whom, answered from three sources that must agree: the model
server's bill, the histories (each recorded answer, each spend a cancelled call reported; see
`waypoint._torture.evidence`) and the ledger a user sees (a run's result, or with no result its
memo). What none of them can know is excused by name and counted: a model attempt whose answer
never reached a step (a worker killed mid-call, a reply dropped, a timeout) may have been billed
whole; the output a call cut mid-reply had not yet been told of was billed too.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from waypoint._torture.evidence import Execution, chains, wider
from waypoint.protocol import Limits, RunResult, Usage

EPSILON_USD = 1e-9


@dataclass
class Total:
    """What a run's ledger says it spent, and whether that is its final word."""

    tokens: int
    cost_usd: float
    final: bool
    """From its result, or the memo of a run that ended cancelled: what billing compares."""


def usage_of(raw: Mapping[str, Any]) -> Usage:
    """A server's usage as our model (unknown fields, e.g. server tool counts, dropped)."""
    return Usage.model_validate({k: v for k, v in raw.items() if k in Usage.model_fields})


def _input_side(u: Usage) -> tuple[int, ...]:
    return (
        u.input_tokens,
        u.cache_creation_input_tokens,
        u.cache_creation_1h_input_tokens,
        u.cache_read_input_tokens,
    )


@dataclass
class Bill:
    """The server's answers, less those matched to what cancelled calls reported."""

    pool: list[int]
    """Totals of the answers no cancelled call claimed."""
    reported: int
    """What the cancelled calls matched reported, which the ledger must hold."""
    unreported: int
    """Tokens the server billed for cut calls beyond what they reported (their later output)."""
    unmatched: list[str]
    """Cancelled calls whose reported spend matches no answer the server gave."""


def match(billed: Iterable[Usage], executions: Iterable[Execution]) -> Bill:
    """Each cancelled call's report taken to the answer it was: same prompt, as much output."""
    pool = list(billed)
    reported, unreported, unmatched = 0, 0, []
    for ex in executions:
        for cut in ex.cancelled:
            said = cut.spend.usage
            found = next(
                (
                    [i]
                    for i, u in enumerate(pool)
                    if _input_side(u) == _input_side(said)
                    and u.output_tokens >= said.output_tokens
                    and (not cut.spend.known or u.total == said.total)
                ),
                None,
            ) or _retried(pool, said)
            if found is None:
                unmatched.append(f"{ex.workflow_id} {cut.step_id} reported {said.total}")
                continue
            unreported += sum(pool.pop(i).total for i in sorted(found, reverse=True)) - said.total
            reported += said.total
    return Bill([u.total for u in pool], reported, unreported, unmatched)


def _retried(pool: list[Usage], said: Usage) -> list[int] | None:
    """The answers a retry's report sums: one prompt sent k times, as much output between them.

    A model step retried after its worker was freed reports, when a steer or cancel cuts it,
    the spend of the freed attempt's call with its own (`waypoint._activities.model`).
    """
    wanted = _input_side(said)
    for side in sorted({_input_side(u) for u in pool}):
        times = {a // b for a, b in zip(wanted, side, strict=True) if b}
        k = times.pop() if len(times) == 1 else 0
        if k < 2 or tuple(k * b for b in side) != wanted:
            continue
        same = [n for n, u in enumerate(pool) if _input_side(u) == side][:k]
        if len(same) == k and sum(pool[n].output_tokens for n in same) >= said.output_tokens:
            return same
    return None


def unknowable(executions: Iterable[Execution]) -> dict[str, int]:
    """Model attempts whose spend nobody can know, by why, over every history."""
    out: dict[str, int] = {}
    for ex in executions:
        for why, n in ex.unknowable.items():
            out[why] = out.get(why, 0) + n
    return out


def billing(
    ledger: int, bill: Bill, lost: Mapping[str, int], excused: dict[str, int] | None = None
) -> list[str]:
    """The ledger holds what was billed, less only what nobody could know.

    That is the unreported output of calls cut mid-reply, and at most one whole answer per
    attempt in `lost`; with nothing lost or cut, equal. `excused` gets what was excused.
    """
    n = sum(lost.values())
    billed = sum(bill.pool) + bill.reported + bill.unreported
    whole = sum(sorted(bill.pool, reverse=True)[:n])
    if excused is not None:
        excused.update({k: v for k, v in lost.items() if v})
        if bill.unreported:
            excused["unreported_output_tokens"] = bill.unreported
    most = billed - bill.unreported  # what the worker was told of
    if ledger > most or ledger < most - whole:
        why = ", ".join(f"{k} {v}" for k, v in sorted(lost.items()) if v) or "none"
        return [
            f"billing: the server billed {billed} tokens, the ledger says {ledger}; excused: "
            f"{bill.unreported} unreported output of cut calls, {n} attempts of unknowable "
            f"spend ({why}, at most {whole} tokens)"
        ]
    return []


def joint_ledger(
    runs: list[str], totals: Mapping[str, Total], executions: list[Execution]
) -> int | None:
    """The scenario's spend by its ledgers: the run's, and each fork's beyond what it carried.

    None when a run's final totals are not known (failed, stuck), or a fork loaded nothing.
    """
    first = {ex.workflow_id: ex for ex in executions if ex.input and ex.input.fork}
    spent = 0
    for i, run in enumerate(runs):
        total = totals.get(run)
        if total is None or not total.final:
            return None
        carried = 0
        if i:
            fork = first.get(run)
            if fork is None or fork.fork_state is None:
                return None
            carried = fork.fork_state.total_tokens
        spent += total.tokens - carried
    return spent


def cancelled_spend(
    runs: list[str],
    totals: Mapping[str, Total],
    results: Mapping[str, RunResult],
    executions: list[Execution],
    bill: Bill,
) -> list[str]:
    """Every call a steer or cancel cut that reported its spend is in the ledger, and billed."""
    found = [f"cancelled_spend: {u}, which no answer of the server was" for u in bill.unmatched]
    grouped = chains(executions)
    reruns = {w for w, _ in grouped if sum(1 for v, _ in grouped if v == w) > 1}
    for (workflow_id, _), group in grouped.items():
        if workflow_id not in runs or workflow_id not in totals or workflow_id in reruns:
            continue  # a rerun's result and memo are its last chain's: not this one's to judge
        cut = [c for ex in group for c in ex.cancelled]
        result = results.get(workflow_id)
        if result is not None:
            records = {r.step_id: r for r in result.ledger if r.kind == "model"}
            for c in cut:
                record = records.get(c.step_id)
                if record is not None and record.tokens != c.spend.usage.total:
                    found.append(
                        f"cancelled_spend: {workflow_id} {c.step_id} reported "
                        f"{c.spend.usage.total} tokens when cancelled, its ledger line says "
                        f"{record.tokens}"
                    )
        recorded = sum(a.usage.total for ex in group for a in ex.answers)
        reported = sum(c.spend.usage.total for c in cut)
        carried = group[0].fork_state.total_tokens if group[0].fork_state else 0
        if cut and totals[workflow_id].tokens < recorded + reported + carried:
            found.append(
                f"cancelled_spend: {workflow_id}'s ledger says {totals[workflow_id].tokens} "
                f"tokens; its history's answers hold {recorded}, its {len(cut)} cancelled "
                f"calls reported {reported}" + (f", it carried {carried}" if carried else "")
            )
    return found


def fork_billing(
    runs: list[str],
    totals: Mapping[str, Total],
    results: Mapping[str, RunResult],
    executions: list[Execution],
) -> list[str]:
    """A fork carries its source's spend up to the fork point, no more, and adds its own.

    The source's spend up to turn N is read from the source's ledger lines of turns 1..N (when
    its result holds them all), or else from the lines the fork kept of them; either must be
    what the fork started its totals from (its recorded `load_fork` state).
    """
    found: list[str] = []
    by_id: dict[str, list[Execution]] = {}
    for ex in executions:
        by_id.setdefault(ex.workflow_id, []).append(ex)
    for run in runs[1:]:
        loaded = next((e.fork_state for e in by_id.get(run, []) if e.fork_state), None)
        first = next((e for e in by_id.get(run, []) if e.input and e.input.fork), None)
        if loaded is None or first is None or first.input is None or first.input.fork is None:
            continue
        source, turn = first.input.fork.workflow_id, first.input.fork.after_turn
        carried = loaded.total_tokens
        kept = _lines(results.get(source), turn) if loaded.archived.tokens == 0 else []
        own = _lines(results.get(run), turn)
        for where, lines in (("the source's", kept), ("the fork's own", own)):
            if lines and sum(r.tokens for r in lines) != carried:
                found.append(
                    f"fork_billing: {run} (after turn {turn} of {source}) carried {carried} "
                    f"tokens; {where} ledger lines of turns 1-{turn} hold "
                    f"{sum(r.tokens for r in lines)}"
                )
        source_total = totals.get(source)
        if source_total is not None and source_total.final and carried > source_total.tokens:
            found.append(
                f"fork_billing: {run} carried {carried} tokens, more than its source "
                f"{source} spent in all ({source_total.tokens})"
            )
        total = totals.get(run)
        answered = sum(a.usage.total for e in by_id[run] for a in e.answers)
        if total is not None and total.final and total.tokens < carried + answered:
            found.append(
                f"fork_billing: {run}'s ledger says {total.tokens} tokens, less than the "
                f"{carried} it carried and the {answered} its own history's answers hold"
            )
    return found


def _lines(result: RunResult | None, turn: int) -> list[Any]:
    """A completed run's ledger lines of turns 1..`turn`, when it holds them all; else none."""
    if result is None or result.steps_archived:
        return []
    return [
        r
        for r in result.ledger
        if r.step_id[:1] == "t"
        and r.step_id.split(".", 1)[0][1:].isdigit()
        and 1 <= int(r.step_id.split(".", 1)[0][1:]) <= turn
        and ".fork." not in r.step_id
    ]


def budget(runs: list[str], totals: Mapping[str, Total], executions: list[Execution]) -> list[str]:
    """No run, whatever its end (done, cancelled, parked, failed, forked), spent past a budget.

    Judged twice: after each model call its history recorded, the spend so far against the
    limits in force while the call ran (what the execution began with, a fork what it loaded,
    any `raise_limits` sent meanwhile); and the run's final totals (a sub-agent's spend
    included) against the largest its history shows in force at any time.
    """
    found = [
        f"budget: {ex.workflow_id} had spent {what} after {s.step_id}, past {cap} in force then"
        for ex in executions
        if ex.workflow_id in runs
        for s in ex.spent
        if s.cap is not None
        for what, cap in _past(s.tokens, s.cost_usd, s.cap)
    ]
    for run in runs:
        total = totals.get(run)
        limits = [lim for ex in executions if ex.workflow_id == run for lim in ex.limits]
        if total is None or not limits:
            continue
        largest = functools.reduce(wider, limits)
        found += [
            f"budget: {run} spent {what} past {cap}"
            for what, cap in _past(total.tokens, total.cost_usd, largest)
        ]
    return found


def _past(tokens: int, cost: float, cap: Limits) -> list[tuple[str, str]]:
    out = []
    if cap.max_cost_usd is not None and cost > cap.max_cost_usd + EPSILON_USD:
        out.append((f"${cost:.4f}", f"max_cost_usd={cap.max_cost_usd}"))
    if cap.max_total_tokens is not None and tokens > cap.max_total_tokens:
        out.append((f"{tokens} tokens", f"max_total_tokens={cap.max_total_tokens}"))
    return out
