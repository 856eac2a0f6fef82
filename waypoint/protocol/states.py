"""Every state a run can be in, defined once: what it means, how it waits, and what moves it on.

The workflow, the client, the CLI, the console and the harnesses take their sets of states from
here, and the docs page "A run is stuck" (`docs/stuck.md`) is rendered from `STATES`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

Kind = Literal["moving", "waiting", "stuck", "ended", "closed"]
"""`moving`: goes on by itself; `waiting`: a call waits for a person's decision, as designed;
`stuck`: stopped on a problem, only an operator moves it; `ended`: the run's own end;
`closed`: Temporal closed it (failed, or cancelled)."""


RunState = Literal[
    "starting",
    "running",
    "paused",
    "awaiting_approval",
    "awaiting_answer",
    "needs_reconciliation",
    "limit_reached",
    "model_unavailable",
    "request_invalid",
    "output_invalid",
    "tool_changed",
    "refused",
    "done",
    "failed",
    "cancelled",
]
"""Every state, named: `STATES` says what each means (a test holds the two to the same names)."""


@dataclass(frozen=True)
class Move:
    """One way to move a run on: its CLI command, its API call, the console page's button."""

    does: str
    cli: str
    api: str = ""
    """The console API's route under `POST /api/runs/{run}/`; '' when it has none."""
    page: str = ""
    """The button on the run's console page; '' when it has none."""


@dataclass(frozen=True)
class State:
    """A run state: what it means, what kind of wait it is, and the moves that end it."""

    means: str
    kind: Kind
    moves: tuple[Move, ...]
    call: bool = False
    """A tool call holds it (the call's step waits), not the run as a whole."""
    resumable: bool = False
    """`resume` sends its parked step again (the `resume` signal, not `raise_limits`)."""
    label: str = ""
    """The state in a few plain words, as the console shows it to people."""


STEER = Move("say something to the model at its next safe point", "waypoint steer RUN TEXT",
             "steer", "Steer")  # fmt: skip
CANCEL = Move("cancel it: steps in flight stop, effects report first", "waypoint cancel RUN",
              "cancel", "Cancel run")  # fmt: skip
FORK = Move("start a new run from a finished turn", "waypoint fork RUN --after-turn N")
WORKER = Move("start a worker that hosts its agent", "waypoint worker")
APPROVE = Move("approve the call", "waypoint approve RUN STEP", "approve", "Approve")
REJECT = Move("reject it (the model is told why)", "waypoint reject RUN STEP --reason WHY",
              "reject", "Reject")  # fmt: skip
ANSWER = Move("answer the call", "waypoint answer RUN STEP --json '{...}'", "answer", "Answer")
RESOLVE = Move("say what happened, reconcile again, or abandon the step",
               "waypoint resolve RUN STEP --result JSON|--text TEXT|--retry|--abort",
               "resolve", "Resolve")  # fmt: skip
RAISE = Move("raise the limit: it goes on where it stopped",
             "waypoint resume RUN --max-turns N|--max-cost-usd USD|--max-total-tokens N",
             'resume {"max_turns": N}', "Raise limits")  # fmt: skip
RETRY = Move("retry the model step once the provider is back", "waypoint resume RUN", "resume",
             "Resume")  # fmt: skip
RESEND = Move("send it again", "waypoint resume RUN", "resume", "Resume")
TRIES = Move("give the model more tries at its answer", "waypoint resume RUN", "resume", "Resume")
ROLLBACK = Move("roll the tool back, then run the step again", "waypoint resume RUN", "resume",
                "Resume")  # fmt: skip
REPLAN = Move("adopt the new build's tools (nothing else) and tell the model",
              "waypoint resume RUN --replan", 'resume {"replan": true}', "Resume")  # fmt: skip
RESULT = Move("read its output", "waypoint result RUN")
UNPAUSE = Move("let it go on where it stopped", "waypoint unpause RUN", "unpause", "Unpause run")

STATES: dict[str, State] = {
    "starting": State("started; no worker has taken it up yet", "moving", (WORKER,),
                      label="Starting"),
    "running": State("a model or tool step is in flight", "moving", (STEER,), label="Running"),
    "paused": State("an operator paused it: it starts no step until unpaused; approvals waiting "
                    "can still be decided, and an approved call runs after", "stuck", (UNPAUSE,),
                    label="Paused"),
    "awaiting_approval": State("a tool call waits for a person to approve its exact arguments",
                               "waiting", (APPROVE, REJECT), call=True,
                               label="Waiting for approval"),
    "awaiting_answer": State("a client-answered tool call waits for its answer", "waiting",
                             (ANSWER,), call=True, label="Waiting for an answer"),
    "needs_reconciliation": State("an effect may have happened and its tool cannot confirm it; "
                                  "the run never guesses", "stuck", (RESOLVE,), call=True,
                                  label="Unclear effect: needs a person"),
    "limit_reached": State("a limit (turns, cost, tokens, continue-as-new count) stopped it before "
                           "it spent more", "stuck", (RAISE,), label="Stopped at a limit"),
    "model_unavailable": State("the model provider failed past its retries (an outage, or an "
                               "unknown model or price)", "stuck", (RETRY,), resumable=True,
                               label="Model unavailable"),
    "request_invalid": State("the API rejected the request the run built: sent unchanged, it "
                             "fails again; fix its cause first (a fixed worker, or "
                             "`waypoint correct RUN --step S --result R`)", "stuck",
                             (RESEND, FORK), resumable=True, label="Request refused by the API"),
    "output_invalid": State("the final answer did not fit the agent's output type, try after try",
                            "stuck", (TRIES,), resumable=True, label="Answer did not fit"),
    "tool_changed": State("a deploy changed a tool a step needs (`on_change='refuse'`); a "
                          "rollback is of the tool, not of Waypoint (it replays the park)", "stuck",
                          (ROLLBACK, REPLAN), call=True, resumable=True, label="A tool changed"),
    "refused": State("the model refused (stop reason `refusal`)", "ended", (FORK,),
                     label="Claude declined"),
    "done": State("finished: its output is its result", "ended", (RESULT, FORK), label="Done"),
    "failed": State("Temporal failed it (`waypoint status RUN` says why)", "closed", (FORK,),
                    label="Failed"),
    "cancelled": State("cancelled on request", "closed", (FORK,), label="Cancelled"),
}  # fmt: skip
"""Every `RunState`, in order (a test holds the two to the same names). Besides its moves,
`CANCEL` ends any run not over."""


def _where(test: Callable[[State], bool]) -> frozenset[str]:
    return frozenset(name for name, s in STATES.items() if test(s))


PARKED_STATES = _where(lambda s: s.kind in ("waiting", "stuck"))
"""States in which a run waits for a person or a command (`waypoint watch` shows them so)."""
STUCK_STATES = _where(lambda s: s.kind == "stuck")
"""States a run leaves only by an operator's hand (a harness lends none)."""
CALL_STATES = _where(lambda s: s.call)
"""States in which a tool call waits, not the run as a whole."""
RESUMABLE_STATES = _where(lambda s: s.resumable)
"""Parked states that `resume` moves on (a limit is raised instead, the others decided)."""
ENDED_STATES = _where(lambda s: s.kind == "ended")
"""The run's own end: its result is final."""
FINAL_STATES = _where(lambda s: s.kind in ("ended", "closed"))
"""Nothing moves the run any more."""

STEP_WAITING = frozenset(
    {"scheduled", "awaiting_approval", "awaiting_answer", "needs_reconciliation"}
)
"""Step statuses of a call not finished yet."""
STEP_FAILED = frozenset({"error", "rejected", "aborted", "cancelled"})
"""Step statuses of a call that ended without a result of its own."""
STEP_FINAL = STEP_FAILED | {"completed"}
"""Step statuses that do not change any more."""


def shown_state(execution: str, inner: str) -> str:
    """The state to show: Temporal's for a closed run, else the run's own.

    `execution` is `running` or how Temporal closed the run (`views.execution_name`).
    """
    if execution == "completed":
        return inner if inner in ENDED_STATES else "done"
    return inner if execution == "running" else execution
