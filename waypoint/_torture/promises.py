"""Issue 48's promises as invariants: what an effect acted on, what a fork saw, what a replan took.

Judged from the histories (`waypoint._torture.evidence`: when each tool step was scheduled,
each model call's request, each spec loaded) and the downstream (`waypoint._torture.agent`:
each read's answer and when it returned, when each effect was written), never from what the
workflow concluded:

- `fresh_reads`: no effect is scheduled on a read older than its tool's `fresh_for` (with
  `SLACK` for the recorded clock's round trips; judged at the clock the run last asked when a
  workflow task was lost in between) unless that read was read again after the wait,
  and the newest read of it before the effect returned what the model acted on (its newest
  answer before the model call that made the effect's call). Reads are dated as they returned
  downstream, whatever the durability: a read beside a slow one in a `turn` reply is as old as
  it is, not as old as its turn (the product dates each by its own activity's stamp, so a
  task lost after a read does not age it). A read whose re-read failed before that model call
  (a changed tool) was dropped and the model told so: it acted knowing, and is not judged.
- `fork_reads`: a fork acts only on what it saw at its fork point: its source's reads up to
  then (until the source's next model call was scheduled), its own since; a violation of the
  above on a read it inherited is a fork's; and the ledger a fork loads holds no refresh its
  source made after the fork point.
- `replan_keeps_spec`: a run's prompt, model and settings, in every model call it sends, are
  its start snapshot's, and every state it carries across continue-as-new or hands a fork
  holds the snapshot's spec but for its tools (prompt, model, limits, policy, settings): a
  replan (`tN.replan.K`) adopts tools, nothing else.

`approval_gate` (`waypoint._torture.approvals`) judges the policy in force from `snapshot`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta

from waypoint._torture.agent import EFFECT_TOOLS
from waypoint._torture.evidence import Execution, chains
from waypoint.protocol import AgentSpec

SLACK = 1.5
"""Seconds an effect may follow its read's window: the recorded clock dates a read a workflow
task after it returned, and the effect is scheduled a task after the clock was asked."""
FORK_ID = re.compile(r"(?P<source>.+)-fork(?P<turn>\d+)-[0-9a-f]{6}")
"""The id `runs.fork` gives a fork: its source run and the turn it forks after."""
KEPT = ("system", "model", "limits", "policy", "settings", "signed_decisions", "approval_hash")
"""What a replan never changes: the spec's fields but its tools and plan version."""
TURN = re.compile(r"t(\d+)\.")


@dataclass(frozen=True)
class Read:
    """A read's answer as the downstream saw it return."""

    workflow_id: str
    chain: str
    step_id: str
    tool: str
    city: str
    value: str
    ended: float

    @property
    def refresh(self) -> bool:
        """A read again (`tN.tool.K.NAME.freshM`), not the model's own call."""
        return ".fresh" in self.step_id


Chain = tuple[str, str]
"""(workflow id, first execution run id)."""


def snapshot(group: list[Execution]) -> AgentSpec | None:
    """The spec a chain started with: its start's `t0.spec`, a fork's loaded, a carried one."""
    first = group[0]
    for step_id, spec in first.specs:
        if step_id == "t0.spec":
            return spec
    if first.fork_state is not None:
        return first.fork_state.spec
    if first.input is not None and first.input.resume is not None:
        return first.input.resume.spec
    return None


def source_of(workflow_id: str, grouped: dict[Chain, list[Execution]]) -> tuple[Chain, int] | None:
    """A fork's source chain (the first chain of its source run) and its fork turn."""
    fork = FORK_ID.fullmatch(workflow_id)
    if fork is None:
        return None
    theirs = [k for k in grouped if k[0] == fork["source"]]
    if not theirs:
        return None
    first = min(theirs, key=lambda k: grouped[k][0].start)
    return first, int(fork["turn"])


def promises(
    executions: list[Execution],
    reads: Iterable[tuple[str, str, str, str, str, str, float]],
    written: dict[str, list[float]],
    effect_keys: Iterable[str],
) -> list[str]:
    """Every broken promise, as `invariant: what happened`."""
    grouped = chains(executions)
    chain_of = {ex.run_id: (ex.workflow_id, ex.chain) for ex in executions}
    rows = [
        Read(wf, chain_of.get(run, (wf, run))[1], step, tool, city, value, ended)
        for wf, run, step, tool, city, value, ended in reads
    ]
    found = replan_keeps_spec(grouped)
    found += _fresh(grouped, rows, written, effect_keys)
    found += fork_ledgers(grouped, rows)
    return found


def _fork_point(source: list[Execution], turn: int, rows: list[Read]) -> float:
    """When the source's turn `turn` had surely ended: its next model call was scheduled.

    A refresh between its turn's last step and that call is the fork's: the note it writes
    joins the turn's last message, which the fork keeps (and a refused effect leaves no step
    to date the turn's end by). With no later model call, its turn's last step (a `turn`
    reply's reads by their rows).
    """
    later = [
        s.scheduled
        for ex in source
        for s in ex.sent
        if s.purpose == "turn" and _turn(s.step_id) > turn
    ]
    if later:
        return min(later)
    chain = (source[0].workflow_id, source[0].chain)
    read = [
        r.ended
        for r in rows
        if (r.workflow_id, r.chain) == chain and _turn(r.step_id) == turn and not r.refresh
    ]
    own = [
        max(t.ended, t.scheduled)
        for ex in source
        for t in ex.tools
        if _turn(t.step_id) == turn and ".fresh" not in t.step_id
    ]
    asked = [s.scheduled for ex in source for s in ex.sent if _turn(s.step_id) == turn]
    return max(own + asked + read, default=float("inf"))


def _turn(step_id: str) -> int:
    m = TURN.match(step_id)
    return int(m[1]) if m else 0


def _view(key: Chain, grouped: dict[Chain, list[Execution]], rows: list[Read]) -> list[Read]:
    """The reads a chain may act on, oldest first: its own and, a fork's, its source's."""
    own = [r for r in rows if (r.workflow_id, r.chain) == key]
    found = source_of(key[0], grouped)
    if found is None:
        return own
    source, turn = found
    point = _fork_point(grouped[source], turn, rows)
    inherited = [r for r in rows if (r.workflow_id, r.chain) == source and r.ended <= point]
    return sorted([*inherited, *own], key=lambda r: r.ended)


def _fresh(
    grouped: dict[Chain, list[Execution]],
    rows: list[Read],
    written: dict[str, list[float]],
    effect_keys: Iterable[str],
) -> list[str]:
    found: list[str] = []
    for key in sorted(set(effect_keys)):
        parts = key.split("/")
        if len(parts) != 3 or (parts[0], parts[1]) not in grouped:
            continue  # a sub-agent's key extends its parent step's: judged as the parent's
        chain: Chain = (parts[0], parts[1])
        step_id = parts[2]
        group = grouped[chain]
        spec = snapshot(group)
        if spec is None or step_id.rsplit(".", 1)[-1] not in EFFECT_TOOLS:
            continue
        windows = {t.name: t.fresh_for for t in spec.tools if t.fresh_for is not None}
        if not windows:
            continue
        at = _scheduled(group, step_id, written.get(key, []))
        asked = _asked(group, step_id, at)
        if at is None or asked is None:
            continue
        decided = _decided(group, at)
        view = _view(chain, grouped, rows)
        told = _told(chain, grouped, rows, asked)
        view = [r for r in view if r.step_id.split(".fresh")[0] not in told]
        found += _judge(chain, step_id, (decided, at), asked, windows, view)
    return found


def _told(
    key: Chain, grouped: dict[Chain, list[Execution]], rows: list[Read], asked: float
) -> set[str]:
    """Reads dropped before the model call at `asked`: a re-read failed and the model was told.

    A fork knows what its source was told up to its fork point (the note is in its transcript).
    """
    tries = [(ex, float("inf")) for ex in grouped[key]]
    found = source_of(key[0], grouped)
    if found is not None:
        source, turn = found
        point = _fork_point(grouped[source], turn, rows)
        tries += [(ex, point) for ex in grouped[source]]
    return {
        t.step_id.rsplit(".", 1)[0]
        for ex, before in tries
        for t in ex.tools
        if ".fresh" in t.step_id and not t.completed and t.scheduled < min(asked, before)
    }


def _scheduled(group: list[Execution], step_id: str, writes: list[float]) -> float | None:
    """When the effect's run was decided: its last scheduling before its first write."""
    times = sorted(t.scheduled for ex in group for t in ex.tools if t.step_id == step_id)
    if not times:
        return None
    before = [t for t in times if not writes or t <= writes[0]]
    return before[-1] if before else times[0]


def _decided(group: list[Execution], at: float) -> float:
    """When the run judged its reads for an effect scheduled at `at`.

    Then, or at the clock it last asked if a workflow task was lost since: a killed worker's
    task times out before the effect it decided on is scheduled.
    """
    clocks = [c for ex in group for c in ex.clocks if c <= at]
    if not clocks:
        return at
    last = max(clocks)
    lost = any(last < t < at for ex in group for t in ex.lost_tasks)
    return last if lost else at


def _asked(group: list[Execution], step_id: str, at: float | None) -> float | None:
    """When the model call that made the effect's call was scheduled (its turn's last before)."""
    turn = TURN.match(step_id)
    if at is None or turn is None:
        return None
    calls = [
        s.scheduled
        for ex in group
        for s in ex.sent
        if s.purpose == "turn" and s.scheduled < at and s.step_id.startswith(f"t{turn[1]}.")
    ]
    return max(calls, default=None)


def _judge(
    chain: Chain,
    step_id: str,
    times: tuple[float, float],
    asked: float,
    windows: dict[str, timedelta],
    view: list[Read],
) -> list[str]:
    """What the effect acted on stale or changed, one line per read.

    `times`: when the run judged its reads, and when it scheduled the effect. The reads it
    made in between (its refreshes, after the clock it judged them by) are what it acted on,
    and are as old as the judgement, no older. A read of another chain is a fork's
    inheritance: a violation on it is `fork_reads`.
    """
    at, scheduled = times
    workflow_id = chain[0]
    found: list[str] = []
    keys = {(r.tool, r.city) for r in view if r.tool in windows and r.ended < asked}
    for tool, city in sorted(keys):
        same = [r for r in view if (r.tool, r.city) == (tool, city)]
        seen = [r for r in same if r.ended < asked][-1]
        last = [r for r in same if r.ended < scheduled][-1]
        window = windows[tool].total_seconds()
        age = at - last.ended
        theirs = {(r.workflow_id, r.chain) for r in (last, seen)} != {chain}
        name = "fork_reads" if theirs else "fresh_reads"
        shown = f"{tool}({city})"
        if age > window + SLACK:
            again = "" if last.refresh else ", never read again"
            found.append(
                f"{name}: {workflow_id} {step_id} was scheduled {age:.1f} s after {shown} "
                f"last returned ({last.step_id}{again}; it holds {window:g} s)"
            )
        elif last.value != seen.value:
            found.append(
                f"{name}: {workflow_id} {step_id} ran on {shown} = {seen.value!r} "
                f"({seen.step_id}), though {last.step_id} had read {last.value!r}"
            )
    return found


def replan_keeps_spec(grouped: dict[Chain, list[Execution]]) -> list[str]:
    """Every model call and every carried state of a chain keeps its snapshot but for tools."""
    found: list[str] = []
    for key, group in grouped.items():
        spec = snapshot(group)
        if spec is None:
            continue
        replans = sorted((step, sp) for ex in group for step, sp in ex.specs if ".replan." in step)
        after = f" (after {', '.join(s for s, _ in replans)})" if replans else ""
        wrong = next(
            (
                s
                for ex in group
                for s in ex.sent
                if s.purpose == "turn"
                and (s.system, s.model, s.settings)
                != (spec.system, spec.model, spec.settings.model_dump(mode="json"))
            ),
            None,
        )
        if wrong is not None:
            field = "prompt" if wrong.system != spec.system else "model or settings"
            found.append(
                f"replan_keeps_spec: {key[0]} {wrong.step_id} was sent a {field} other than "
                f"its start snapshot's{after}"
            )
        for ex in group[1:]:
            carried = ex.input.resume.spec if ex.input and ex.input.resume else None
            if carried is not None and (diff := _differs(spec, carried)):
                found.append(
                    f"replan_keeps_spec: {key[0]} carried a spec whose {diff} differ from its "
                    f"start snapshot's into run {ex.run_id}{after}"
                )
        found += _fork_spec(key, group, grouped)
    return found


def _fork_spec(
    key: Chain, group: list[Execution], grouped: dict[Chain, list[Execution]]
) -> list[str]:
    """A fork's loaded spec is its source's start snapshot's but for the tools."""
    state = group[0].fork_state
    found = source_of(key[0], grouped)
    if state is None or found is None:
        return []
    source, _ = found
    theirs = snapshot(grouped[source])
    out: list[str] = []
    if theirs is not None and state.spec is not None and (diff := _differs(theirs, state.spec)):
        out.append(
            f"replan_keeps_spec: fork {key[0]} loaded a spec whose {diff} differ from its "
            "source's start snapshot's"
        )
    return out


def _differs(start: AgentSpec, now: AgentSpec) -> str:
    """The kept fields that differ, named; '' when none does."""
    return ", ".join(f for f in KEPT if getattr(start, f) != getattr(now, f))


def fork_ledgers(grouped: dict[Chain, list[Execution]], rows: list[Read]) -> list[str]:
    """No fork loads a refresh line its source wrote after the fork point."""
    found: list[str] = []
    for key, group in grouped.items():
        state = group[0].fork_state
        located = source_of(key[0], grouped)
        if state is None or located is None:
            continue
        source, turn = located
        point = _fork_point(grouped[source], turn, rows)
        made = {r.step_id: r.ended for r in rows if (r.workflow_id, r.chain) == source}
        for line in state.ledger:
            ended = made.get(line.step_id)
            if ".fresh" in line.step_id and ended is not None and ended > point:
                found.append(
                    f"fork_reads: fork {key[0]} loaded its source's {line.step_id} "
                    f"({line.summary[:60]!r}), read {ended - point:.1f} s after the fork point"
                )
    return found
