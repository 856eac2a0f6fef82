"""The two activities the workflow calls: an agent's notice plan, and one notice's delivery.

`waypoint.notify` sends one notice to one channel once per key and channel. The generic
webhook's receiver deduplicates on `Waypoint-Key`: a receiver that fails makes the attempt
raise, so Temporal retries it with backoff, on any worker; the last attempt (the retry policy's
`maximum_attempts`, `NOTIFY_ATTEMPTS` when it sets none) reports `failed` instead, as does a
refusal no retry can mend (a 4xx). Slack, Teams and e-mail cannot deduplicate, so their tries
stay inside one attempt, with the policy's backoff; a second attempt means the first was cut
(a crash, a timeout), perhaps mid-send, perhaps on another worker, so it reports `unknown` and
sends nothing, as does a delivery an earlier history segment started (`NoticeRequest.carried`):
at most one message, on every host.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from waypoint._activities.heartbeat import heartbeating
from waypoint._agent import Agent
from waypoint._notify import formats
from waypoint._notify.config import Channel, EmailEntry, NotifyConfig
from waypoint._notify.deliveries import Deliveries
from waypoint._notify.links import review_link
from waypoint._notify.send import TIMEOUT, SendFailed, post, send_mail, webhook_headers
from waypoint.protocol.notices import (
    NOTICE_PLAN,
    NOTIFY,
    NOTIFY_ATTEMPTS,
    Delivery,
    Notice,
    NoticePlan,
    NoticeRequest,
)


class NotifyActivities:
    """Delivers notices with `config`'s channels; the agents give each tool's schema."""

    def __init__(
        self,
        config: NotifyConfig,
        agents: Mapping[str, Agent],
        deliveries: Deliveries,
        console_secret: str = "",
    ) -> None:
        self.config = config
        self.agents = agents
        self.deliveries = deliveries
        self.console_secret = console_secret

    @activity.defn(name=NOTICE_PLAN)
    async def notice_plan(self, agent: str) -> NoticePlan:
        """`agent`'s routes and reminder and escalation delays (empty: nobody is told)."""
        return self.config.plan(agent)

    @activity.defn(name=NOTIFY)
    async def notify(self, request: NoticeRequest) -> Delivery:
        """Send `request.notice` to `request.channel`, once; see the module's docstring."""
        info = activity.info()
        policy = info.retry_policy
        last = info.attempt >= ((policy.maximum_attempts if policy else 0) or NOTIFY_ATTEMPTS)
        notice, name = request.notice, request.channel
        channel = self.config.channels.get(name)
        if channel is None:
            detail = f"no channel {name!r} in this worker's notifications file"
            return Delivery(channel=name, key=notice.key, status="failed", detail=detail)
        shown = formats.card(notice, self._schema(notice), self._link(notice, channel))

        before = self.deliveries.begin(notice.key, name)
        if before == "sent":
            return self._told(request, "duplicate", info.attempt)
        if not channel.deduplicates and (
            before == "sending" or info.attempt > 1 or request.carried
        ):
            detail = "a crash may have cut an earlier send: not sent again"
            return self._told(request, "unknown", info.attempt, detail)
        tries, err = info.attempt, None
        if channel.deduplicates:
            err = await heartbeating(self._send(channel, notice, shown), NOTIFY)
        else:  # its tries stay in this attempt: `last` for a retry's sake
            tries, err = await heartbeating(self._tries(channel, notice, shown), NOTIFY)
            last = True
        if err is None:
            self.deliveries.sent(notice.key, name)
            return self._told(request, "sent", tries)
        if err.sent_nothing:
            self.deliveries.forget(notice.key, name)
        elif not channel.deduplicates:
            detail = f"{err}: it may have arrived, so it is not sent again"
            return self._told(request, "unknown", tries, detail)
        if err.permanent or last:
            return self._told(request, "failed", tries, str(err))
        raise ApplicationError(f"channel {name!r}: {err}", type="NoticeNotDelivered") from None

    @staticmethod
    def _told(request: NoticeRequest, status: Any, tries: int, detail: str = "") -> Delivery:
        return Delivery(
            channel=request.channel,
            key=request.notice.key,
            status=status,
            attempts=tries,
            detail=detail,
        )

    async def _tries(
        self, channel: Channel, notice: Notice, shown: formats.Card
    ) -> tuple[int, SendFailed | None]:
        """Send where the receiver cannot deduplicate: (tries, how the last failed or None).

        It tries again here, with the retry policy's backoff, while the receiver surely got
        nothing and the attempt has time left: a retry by Temporal could land on a worker that
        cannot tell a failed send from a cut one.
        """
        info = activity.info()
        policy = info.retry_policy
        most = (policy.maximum_attempts if policy else 0) or NOTIFY_ATTEMPTS
        delay = policy.initial_interval.total_seconds() if policy else 1.0
        timeout = info.start_to_close_timeout
        ends = time.monotonic() + (timeout.total_seconds() if timeout else 60.0)
        tried = 0
        while True:
            tried += 1
            err = await self._send(channel, notice, shown)
            out_of_time = time.monotonic() + delay + TIMEOUT >= ends
            if err is None or not err.sent_nothing or err.permanent or tried == most or out_of_time:
                return tried, err
            await asyncio.sleep(delay)
            if policy is not None:
                delay *= policy.backoff_coefficient
                if policy.maximum_interval is not None:
                    delay = min(delay, policy.maximum_interval.total_seconds())

    def _schema(self, notice: Notice) -> dict[str, Any] | None:
        agent = self.agents.get(notice.agent)
        tool = agent.tool(notice.tool) if agent is not None else None
        return tool.spec().input_schema if tool is not None else None

    def _link(self, notice: Notice, channel: Channel) -> str | None:
        if not self.config.console_url or not self.console_secret:
            return None
        person = channel.entry.person
        return review_link(self.config.console_url, self.console_secret, notice, person)

    async def _send(
        self, channel: Channel, notice: Notice, shown: formats.Card
    ) -> SendFailed | None:
        """One send; how it failed, or None."""
        try:
            if channel.kind == "webhook":
                body = formats.webhook_body(notice, shown)
                await post(channel.url, body, webhook_headers(channel, notice.key, body))
            elif channel.kind == "slack":
                await post(channel.url, formats.slack_body(shown), {})
            elif channel.kind == "teams":
                await post(channel.url, formats.teams_body(shown), {})
            else:
                entry = channel.entry
                assert isinstance(entry, EmailEntry)
                message = formats.email_message(notice, shown, entry.sender, list(entry.to))
                await asyncio.to_thread(send_mail, channel, message)
        except SendFailed as err:
            return err
        return None
