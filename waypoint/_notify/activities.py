"""The two activities the workflow calls: an agent's notice plan, and one notice's delivery.

`waypoint.notify` sends one notice to one channel, at most once per key and channel on this
host (`waypoint._notify.deliveries`): a retry after a crash sends again only to the generic
webhook (its receiver deduplicates on `Waypoint-Key`), and reports `unknown` for Slack, Teams
and e-mail instead. A receiver that fails makes the attempt raise, so Temporal retries it with
backoff; the last attempt (the retry policy's `maximum_attempts`, `NOTIFY_ATTEMPTS` when the
policy sets none) reports `failed` instead, as does a refusal that no retry can mend (a 4xx).
"""

from __future__ import annotations

import asyncio
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
from waypoint._notify.send import SendFailed, post, send_mail, webhook_headers
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

        def told(status: Any, detail: str = "") -> Delivery:
            return Delivery(
                channel=name, key=notice.key, status=status, attempts=info.attempt, detail=detail
            )

        before = self.deliveries.begin(notice.key, name)
        if before == "sent":
            return told("duplicate")
        if before == "sending" and not channel.deduplicates:
            return told("unknown", "a crash may have cut an earlier send: not sent again")
        try:
            await heartbeating(self._send(channel, notice, shown), NOTIFY)
        except SendFailed as err:
            if err.sent_nothing:
                self.deliveries.forget(notice.key, name)
            elif not channel.deduplicates:
                return told("unknown", f"{err}: it may have arrived, so it is not sent again")
            if err.permanent or last:
                return told("failed", str(err))
            raise ApplicationError(f"channel {name!r}: {err}", type="NoticeNotDelivered") from None
        self.deliveries.sent(notice.key, name)
        return told("sent")

    def _schema(self, notice: Notice) -> dict[str, Any] | None:
        agent = self.agents.get(notice.agent)
        tool = agent.tool(notice.tool) if agent is not None else None
        return tool.spec().input_schema if tool is not None else None

    def _link(self, notice: Notice, channel: Channel) -> str | None:
        if not self.config.console_url or not self.console_secret:
            return None
        person = channel.entry.person
        return review_link(self.config.console_url, self.console_secret, notice, person)

    async def _send(self, channel: Channel, notice: Notice, shown: formats.Card) -> None:
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
