"""What each simple verb does to a run, and what it holds: one entry per verb. Deterministic.

A `Verb.simple` verb (`waypoint.protocol.verbs`) takes the run and a reason. The workflow's one
path for them (`operator.simple`) admits it (once by its decision id, signed where the agent
asks), asks its `refusal`, records an operator line saying who, when and why, then calls its
`apply`. A `Holding` stops every step before it starts (`Gates.before_step`, the one funnel the
model and tool steps pass) while it says why, and shows the run in its state. Pure functions
of `AgentState`; this module imports no other workflow module, so the gates can read it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from waypoint.protocol import AgentState
    from waypoint.protocol.verbs import PAUSE, UNPAUSE


@dataclass(frozen=True)
class Simple:
    """A simple verb's effect: why it cannot apply now ('' when it can), and what it does."""

    refusal: Callable[[AgentState], str]
    apply: Callable[[AgentState, str], None]
    """Given the run and the operator line's words (`paused by ops: incident 7`)."""


@dataclass(frozen=True)
class Holding:
    """Something that holds a run before its next step, while `why` says so."""

    why: Callable[[AgentState], str]
    state: str
    """The run state shown while it holds (`waypoint.protocol.states`)."""
    until: str
    """When an approved call runs instead of now ("once the run is unpaused")."""


def _set_paused(s: AgentState, said: str) -> None:
    s.paused = said


def _unset_paused(s: AgentState, _: str) -> None:
    s.paused = ""


SIMPLE: dict[str, Simple] = {
    PAUSE: Simple(lambda s: f"the run is paused already ({s.paused})" if s.paused else "",
                  _set_paused),
    UNPAUSE: Simple(lambda s: "" if s.paused else "the run is not paused: nothing to unpause",
                    _unset_paused),
}  # fmt: skip
"""By verb name: every simple verb the run applies (cancel is Temporal's, not the run's)."""

HOLDINGS = (Holding(lambda s: s.paused, "paused", "once the run is unpaused"),)
"""What holds a run before its next step, first first."""


def holding(s: AgentState) -> tuple[Holding, str] | None:
    """What holds the run now, and why; None when nothing does."""
    for held in HOLDINGS:
        why = held.why(s)
        if why:
            return held, why
    return None
