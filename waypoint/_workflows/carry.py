"""What a run hands to its next history segment: its state, with the ledger bounded.

A long run would otherwise carry every step it ever took, and once that state alone passes
the history budget the run continues-as-new every turn. So a finished model or non-effect
tool step of a turn folded into the transcript's summary, once handed over, is left out and
summed up in `AgentState.archived`: its final form is in the input of the run that carried it,
where `runs.whole_ledger` reads it back; so are the ids of the decisions made on it. Effects,
what people did (operator steps), spec steps and anything waiting are always carried.
Deterministic code only.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from waypoint.protocol import AgentState, LedgerArchive, StepRecord
    from waypoint.protocol.states import STEP_FINAL

from waypoint._workflows.operator import turn_of


class Carry:
    """Remembers what this segment was handed, to tell which steps are already kept in history."""

    def __init__(self, s: AgentState) -> None:
        self.s = s
        self._handed = {r.step_id: r.model_copy() for r in s.ledger}

    def handover(self) -> tuple[AgentState, int]:
        """The state for the next segment, and how many stream events go with it."""
        s, keep, archived = self.s, [], self.s.archived.model_copy()
        for r in s.ledger:
            if self._archivable(r):
                _add(archived, r)
            else:
                keep.append(r)
        update = {
            "ledger": keep,
            "archived": archived,
            "decision_ids": _decided(s.decision_ids, keep),
        }
        return s.model_copy(update=update), s.history_budget().keep_events

    def _archivable(self, r: StepRecord) -> bool:
        """A finished model or non-effect tool step of a summarised turn, handed over before."""
        return (
            r.status in STEP_FINAL
            and not r.effect_key
            and r.kind in ("model", "tool", "notice")
            and _turn(r.step_id) <= self.s.compacted_turns
            and self._handed.get(r.step_id) == r
        )


def _decided(ids: dict[str, str], kept: list[StepRecord]) -> dict[str, str]:
    """The applied decision ids whose step is carried on.

    A repeat of a decision on an archived step finds it finished and is refused, not applied;
    a policy change or correction is an operator step, which is always carried.
    """
    carried = {r.step_id for r in kept}
    return {i: step for i, step in ids.items() if step in carried}


def _add(archived: LedgerArchive, r: StepRecord) -> None:
    archived.steps += 1
    archived.tokens += r.tokens
    archived.cost_usd += r.cost_usd or 0.0
    archived.cost_known = archived.cost_known and (r.kind != "model" or r.cost_usd is not None)


def _turn(step_id: str) -> int:
    """The step's turn; an id that names none counts as the latest, so it is kept."""
    try:
        return turn_of(step_id)
    except ValueError:
        return 1 << 62
