"""What a run tells the people it waits on: one notice per event, the agent's plan, a delivery.

The workflow decides *when* (a call starts waiting, a reminder or escalation timer fires, the
wait ends) and builds a `Notice`; the `waypoint.notify` activity decides *how* (the channels'
formats, signing, the one-time review link) and reports a `Delivery`. Stdlib and pydantic only:
workflow code imports it.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Literal

from pydantic import Field

from waypoint.protocol.base import _Frozen, _unset, _WaitingCall

NOTIFY = "waypoint.notify"
"""The activity that delivers one notice to one channel (`NoticeRequest` -> `Delivery`)."""
NOTICE_PLAN = "waypoint.notice_plan"
"""The activity that reads an agent's plan from the worker's configuration (-> `NoticePlan`)."""
NOTIFY_ATTEMPTS = 6
"""Tries of one delivery. The activity reads the retry policy it runs under and reports
`failed` on its last attempt instead of raising; with no maximum there, it assumes this. A run
schedules it with its own `StepOptions.notice_max_attempts` and backoff."""
NOTIFY_TIMEOUT = timedelta(seconds=60)
"""A test's start-to-close of one delivery attempt (a run's is `notice_timeout`): a send waits
at most 10 s to connect and 10 s for an answer; e-mail takes a few round trips."""
NOTIFY_HEARTBEAT = timedelta(seconds=10)
"""`heartbeat_timeout` of a delivery attempt: it heartbeats every second while it sends, so a
killed worker's attempt is retried within this."""

NoticeEvent = Literal["waiting", "reminder", "escalated", "decided", "timed_out"]
"""`waiting`: a call needs approval or a question an answer; `reminder`: it still waits;
`escalated`: it waits too long and goes to `escalate_to`; `decided`: someone decided or answered;
`timed_out`: the approval's timeout applied."""


class Notice(_WaitingCall):
    """One event of one wait for a call, with what the inbox card shows."""

    key: str
    """`{workflow_id}/{chain}/{step_id}/{event}/{n}`, `chain` the first execution's run id as
    in an effect key: the same across retries, crashes, deploys and continue-as-new (both ids
    survive it), so a receiver can deduplicate on it; new for a rerun under the workflow id."""
    event: NoticeEvent
    kind: Literal["approval", "question"]
    agent: str
    run: str
    """The run's workflow id."""
    since: str
    """When the wait began (ISO 8601, the workflow's clock)."""
    role: str
    """Whom it is for: the role the routing sends it to (an escalation: `escalate_to`)."""
    rule: str | None = Field(default=None, exclude_if=_unset)
    """Why it asks: the approval-policy rule, when a policy did."""
    cost_usd: float = 0.0
    """The run's spend so far."""
    decision: str = Field(default="", exclude_if=_unset)
    """For `decided` and `timed_out`: approved, rejected, answered, timeout."""
    decided_by: str = Field(default="", exclude_if=_unset)
    reason: str = Field(default="", exclude_if=_unset)


class NoticeRequest(_Frozen):
    """The `waypoint.notify` activity's input: one notice for one configured channel."""

    notice: Notice
    channel: str
    carried: bool = Field(default=False, exclude_if=_unset)
    """Started by an earlier history segment and started again by this one: the first send may
    still be under way there, so a channel that cannot deduplicate does not send again."""


class NoticePlan(_Frozen):
    """An agent's notification plan, read once a segment by a recorded activity."""

    routes: dict[str, list[str]] = {}
    """Role -> the channel names its notices go to; empty: nobody is notified."""
    remind_after: timedelta | None = None
    """Remind the same role after a call waited this long (and again at this interval)."""
    escalate_after: timedelta | None = None
    """Escalate after a call waited this long (before the approval's own timeout)."""
    escalate_to: str | None = None
    """The role (a key of `routes`) an escalation goes to."""


class Delivery(_Frozen):
    """What `waypoint.notify` reports for one notice on one channel.

    A receiver that fails is retried with backoff (the activity raises while attempts remain);
    the last attempt reports `failed` instead of raising. The workflow awaits deliveries beside
    the run, never in its path, so a receiver that is down never delays, fails or parks it.
    """

    channel: str
    key: str
    status: Literal["sent", "duplicate", "failed", "unknown"]
    """`duplicate`: already sent under this key; `unknown`: a crash may have cut a send of a
    channel that cannot deduplicate (Slack, Teams, e-mail), so it was not sent again."""
    attempts: int = 1
    detail: str = Field(default="", exclude_if=_unset)
