"""What a run shows without being asked twice: status, memo, search attributes, UI details.

Deterministic code. Search attributes and the memo `describe` reads with no worker up are
upserted when the state or what the run waits for changes, not every turn: each upsert is a
history event and a visibility write. A refused signal rewrites the memo too (its latest few,
reasons shortened), so whoever sent it can read why, with no worker, after the run has
ended. Current details, which cost neither, are refreshed every time.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from waypoint.protocol import (
        MEMO_KEY,
        AgentState,
        IgnoredSignal,
        RunMemo,
        RunStatus,
    )
    from waypoint.protocol import search_attributes as sa
    from waypoint.protocol import verbs as v
    from waypoint.protocol.states import PARKED_STATES

from waypoint._workflows import freshness, policy
from waypoint._workflows.details import render_details

MEMO_STEPS = 4
MEMO_SUMMARY = 60
MEMO_IGNORED = 3
MEMO_STEP_ID = 40
MEMO_REASON = 120
"""Kept small: Temporal warns above 2 KB of memo (`limit.memoSize.warn`); the refusals it
lists add at most about 0.7 KB, however many came and however long, its `fresh` line 0.2 KB."""


def last_stop_reason(s: AgentState) -> str:
    """The stop reason of the latest model step that has one."""
    return next((r.stop_reason for r in reversed(s.ledger) if r.stop_reason), "")


def _glance(s: AgentState) -> dict[str, Any]:
    """What the `status` query and the memo both say of the run."""
    return {
        "state": s.state,
        "detail": s.detail,
        "turn": s.turn,
        "model": s.spec.model if s.spec else "",
        "provider": s.spec.provider if s.spec else "",
        "pending_approvals": [p for k, p in s.pending.items() if k not in s.decisions],
        "pending_questions": [q for k, q in s.questions.items() if k not in s.answers],
        "unresolved": list(s.unresolved.values()),
        "total_tokens": s.total_tokens,
        "cost_usd": s.cost_usd,
        "cost_known": s.cost_known,
        "last_stop_reason": last_stop_reason(s),
        "policy": _policy(s),
    }


def status(s: AgentState) -> RunStatus:
    """The run at a glance (the `status` query)."""
    return RunStatus(
        **_glance(s),
        agent=s.input.agent,
        ignored_signals=[*s.ignored_signals, *_refused_at_task_end(s)],
        plan_version=s.spec.plan_version if s.spec else 1,
        continues=s.continues,
        steps_archived=s.archived.steps,
        ignored_dropped=s.ignored_dropped,
        fresh=freshness.at_a_glance(s),
    )


def _refused_at_task_end(s: AgentState) -> list[IgnoredSignal]:
    """Kept `resume`s that woke nothing, refused: a query runs between workflow tasks.

    Their task has ended; the run records the refusal at its next step (`Gates.resume`).
    """
    early = s.early_resume
    if early is None or early.woke:
        return []
    return [IgnoredSignal(signal=v.RESUME, step_id="", reason=early.refusal())] * len(early.replans)


def memo(s: AgentState) -> RunMemo:
    """The compact view of the run kept in its memo."""
    shown = s.ignored_signals[-MEMO_IGNORED:] if MEMO_IGNORED else []
    return RunMemo(
        **_glance(s),
        last_steps=[
            r.model_copy(update={"summary": r.summary[:MEMO_SUMMARY]})
            for r in s.ledger[-MEMO_STEPS:]
        ],
        updated_at=workflow.now().isoformat(),
        ignored_signals=[
            i.model_copy(
                update={
                    "step_id": _cut(i.step_id, MEMO_STEP_ID),
                    "reason": _cut(i.reason, MEMO_REASON),
                }
            )
            for i in shown
        ],
        ignored_dropped=len(s.ignored_signals) - len(shown) + s.ignored_dropped,
        fresh=freshness.at_a_glance(s, last=MEMO_STEP_ID + MEMO_SUMMARY),
        signed=s.spec is not None and s.spec.signed_decisions,
    )


def _policy(s: AgentState) -> str:
    """The policy line `status` shows; '' for a run with no policy and nothing remembered."""
    return policy.describe(s) if policy.current(s) or s.policy.remembered else ""


def _cut(text: str, limit: int) -> str:
    """`text`, or its first `limit` characters ending in an ellipsis, to show it was cut."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


class Visibility:
    """Mirrors a run's state into search attributes, its memo and the UI's current details."""

    def __init__(self, s: AgentState) -> None:
        self.s = s
        self._published: tuple[object, ...] = ()
        self._refused = len(s.ignored_signals) + s.ignored_dropped
        """Refusals the memo shows: a new one rewrites the memo alone, so it outlives the run."""
        self._since: datetime | None = None
        """Since when the run waits for a person, as last published (None: it does not)."""

    def publish(self) -> None:
        """Upsert what changed since the last call; refresh the current details."""
        s = self.s
        waiting = len(s.pending) + len(s.unresolved) + len(s.questions)
        snapshot: tuple[object, ...] = (s.state, waiting)
        refused = len(s.ignored_signals) + s.ignored_dropped
        if snapshot != self._published:
            first = not self._published
            self._published = snapshot
            shown = [
                sa.STATUS.value_set(s.state),
                sa.PENDING_APPROVALS.value_set(len(s.pending)),
                sa.TURNS.value_set(s.turn),
                sa.COST_USD.value_set(s.cost_usd),
            ]
            self._since = self._waiting_since(first)
            since = sa.WAITING_SINCE
            shown.append(since.value_set(self._since) if self._since else since.value_unset())
            if first and workflow.info().typed_search_attributes.get(sa.AGENT) is None:
                shown.append(sa.AGENT.value_set(s.input.agent))  # a raw start named none
            workflow.upsert_search_attributes(shown)
            self._refused = refused
            workflow.upsert_memo({MEMO_KEY: memo(s)})
        elif refused != self._refused:
            self._refused = refused
            workflow.upsert_memo({MEMO_KEY: memo(s)})
        workflow.set_current_details(render_details(s, workflow.info().workflow_id))

    def _waiting_since(self, first: bool) -> datetime | None:
        """When the oldest open call was asked, else when the run parked; None: it does not wait.

        A park outlives a continue-as-new: the new run starts with the search attribute. To the
        whole second: SQLite visibility compares times as text (`client.paging.TICK`).
        """
        s = self.s
        if s.state not in PARKED_STATES:
            return None
        asked = [p.requested_at for k, p in s.pending.items() if k not in s.decisions]
        asked += [q.asked_at for k, q in s.questions.items() if k not in s.answers]
        if asked:
            return min(datetime.fromisoformat(at) for at in asked).replace(microsecond=0)
        carried = workflow.info().typed_search_attributes.get(sa.WAITING_SINCE) if first else None
        return self._since or carried or workflow.now().replace(microsecond=0)
