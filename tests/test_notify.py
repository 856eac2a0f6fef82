"""Notices delivered by `waypoint.notify` on a real worker to real receivers on loopback.

Each notice goes through a workflow (`NotifyProbe`) and Temporal's retries, to an HTTP
receiver that checks webhook signatures and counts keys, to Slack- and Teams-shaped
receivers, and to an SMTP server (aiosmtpd). What is asserted is what arrived.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from pydantic import BaseModel, Field
from temporalio.client import Client

from tests.conftest import running_worker
from tests.notify_receivers import Mailbox, NotifyProbe, Probe, Receiver, channels, notice
from waypoint import Agent, tool
from waypoint._notify.config import NotifyConfig, read_notify
from waypoint.protocol.notices import Delivery, Notice, NoticePlan, NoticeRequest

SECRET = "hook-secret"
CONSOLE_SECRET = "console-secret"


class Invoice(BaseModel):
    payee: str = Field(description="Who is paid")
    amount_cents: int
    currency: str = "USD"


@tool("effect", idempotent=True, requires_approval=True)
async def pay(args: Invoice) -> str:
    """Pay an invoice."""
    return "paid"


AGENT = Agent(name="payer", model="claude-sonnet-4-6", system="You pay.", tools=[pay])
ARGS = {"payee": "Ada Ltd", "amount_cents": 128000, "currency": "USD"}


@pytest.fixture
async def receivers() -> AsyncIterator[Callable[..., Receiver]]:
    """Makes receivers (started by the test), and stops them all at its end."""
    made: list[Receiver] = []

    def make(**options: int | str) -> Receiver:
        made.append(Receiver(**options))  # type: ignore[arg-type]
        return made[-1]

    yield make
    for receiver in made:
        await receiver.stop()


def config(tmp_path: Path, hook: Receiver, chat: Receiver, mail: Mailbox | None) -> NotifyConfig:
    text = (
        channels(hook)
        + f"""
[channels.teams]
type = "teams"
url_env = "TEAMS_URL"

[channels.mail]
type = "email"
host = "127.0.0.1"
port = {mail.port if mail else 25}
from = "waypoint@example.com"
to = ["ann@example.com"]
person = "ann"

[agents.payer]
routes = {{ approver = ["hook", "slack", "teams", "mail"] }}
remind_after = "30m"
"""
    )
    env = {"HOOK_SECRET": SECRET, "SLACK_URL": chat.url, "TEAMS_URL": chat.url}
    return read_notify(text, tmp_path / "notify.toml", env, [AGENT])


async def deliver(
    client: Client,
    queue: str,
    sent: Notice,
    channel: str,
    attempts: int = 3,
    carried: bool = False,
) -> Delivery:
    request = NoticeRequest(notice=sent, channel=channel, carried=carried)
    return await client.execute_workflow(
        NotifyProbe.run,
        Probe(request=request, attempts=attempts),
        id=f"probe-{uuid.uuid4().hex[:8]}",
        task_queue=queue,
        result_type=Delivery,
    )


def worker(client: Client, queue: str, tmp_path: Path, notify: NotifyConfig):
    return running_worker(
        client,
        [AGENT],
        queue,
        notify=notify,
        console_secret=CONSOLE_SECRET,
        attempt_journal=tmp_path / "attempts",
        workflows=[NotifyProbe],
    )


async def test_each_channel_carries_the_card_once_per_key(
    client: Client, task_queue: str, tmp_path: Path, receivers: Callable[..., Receiver]
) -> None:
    hook, chat = await receivers(secret=SECRET).start(), await receivers().start()
    with Mailbox() as mail:
        notify = config(tmp_path, hook, chat, mail)
        assert notify.plan("payer").routes == {"approver": ["hook", "slack", "teams", "mail"]}
        assert notify.plan("other") == NoticePlan()
        sent = notice(arguments=ARGS)
        async with worker(client, task_queue, tmp_path, notify):
            for channel in ("hook", "slack", "teams", "mail"):
                done = await deliver(client, task_queue, sent, channel)
                assert (done.status, done.channel, done.key) == ("sent", channel, sent.key)
                again = await deliver(client, task_queue, sent, channel)
                assert again.status == "duplicate", again
    assert hook.forged == 0 and hook.keys == {sent.key: 1} and len(hook.requests) == 1
    body = hook.requests[0].json()
    assert body["notice"] == sent.model_dump(mode="json")
    assert body["link"].startswith("http://console.test/r/")
    assert (
        "Amount: 1,280.00 USD" in body["text"] and "Why it asks: amount over 1000" in body["text"]
    )
    assert "Waiting since: 3 March 2026, 14:05 UTC" in body["text"]
    slack, teams = (r.json() for r in chat.requests)
    assert slack["text"] == "payer waits for approval of pay"
    assert {b["type"] for b in slack["blocks"]} == {"header", "section", "actions"}
    assert slack["blocks"][-1]["elements"][0]["url"].startswith("http://console.test/r/")
    (card,) = teams["attachments"]
    assert card["contentType"] == "application/vnd.microsoft.card.adaptive"
    assert card["content"]["type"] == "AdaptiveCard"
    assert {"title": "Cost so far", "value": "$0.0123"} in card["content"]["body"][1]["facts"]
    assert card["content"]["actions"][0]["type"] == "Action.OpenUrl"
    (message,) = mail.messages
    assert message["Subject"] == "payer waits for approval of pay"
    assert message["To"] == "ann@example.com" and message["Waypoint-Key"] == sent.key
    text = message.get_payload()
    assert "Payee: Ada Ltd" in text and "Review it: http://console.test/r/" in text


async def test_a_receiver_down_then_up_gets_the_notice_after_retries(
    client: Client, task_queue: str, tmp_path: Path, receivers: Callable[..., Receiver]
) -> None:
    hook, chat = await receivers(secret=SECRET, fail=2).start(), await receivers().start()
    notify = config(tmp_path, hook, chat, None)
    async with worker(client, task_queue, tmp_path, notify):
        done = await deliver(client, task_queue, notice(), "hook", attempts=4)
    assert (done.status, done.attempts) == ("sent", 3)
    assert len(hook.requests) == 3 and sum(hook.keys.values()) == 1


async def test_a_receiver_down_for_good_is_failed_after_the_last_attempt(
    client: Client, task_queue: str, tmp_path: Path, receivers: Callable[..., Receiver]
) -> None:
    hook, chat = await receivers(secret=SECRET).start(), await receivers().start()
    notify = config(tmp_path, hook, chat, None)
    await chat.stop()  # nothing listens on its port: every connection is refused
    async with worker(client, task_queue, tmp_path, notify):
        done = await deliver(client, task_queue, notice(), "slack", attempts=3)
        assert (done.status, done.attempts) == ("failed", 3), done
        assert "not reachable" in done.detail
        nowhere = await deliver(client, task_queue, notice(), "pager")
        assert nowhere.status == "failed" and "no channel 'pager'" in nowhere.detail
        await chat.start()  # up again: the same key was never sent, so a new try sends it
        later = await deliver(client, task_queue, notice(), "slack")
    assert later.status == "sent" and len(chat.requests) == 1


async def test_a_chat_send_that_may_have_arrived_is_not_sent_again(
    client: Client, task_queue: str, tmp_path: Path, receivers: Callable[..., Receiver]
) -> None:
    hook, chat = (
        await receivers(secret=SECRET, hang_up=1).start(),
        await receivers(hang_up=1).start(),
    )
    notify = config(tmp_path, hook, chat, None)
    async with worker(client, task_queue, tmp_path, notify):
        slack = await deliver(client, task_queue, notice(), "slack")
        webhook = await deliver(client, task_queue, notice(), "hook")
    assert slack.status == "unknown" and "may have arrived" in slack.detail
    assert len(chat.requests) == 1  # at most one message
    assert (webhook.status, webhook.attempts) == ("sent", 2)  # its receiver deduplicates
    assert len(hook.requests) == 2 and sum(hook.keys.values()) == 1


async def test_a_forged_or_stale_webhook_is_refused_by_the_receiver(tmp_path: Path) -> None:
    from tests.notify_receivers import verify
    from waypoint._notify.send import signature

    body = b'{"notice": {}}'
    stamp = "1780000000"
    headers = {"waypoint-timestamp": stamp, "waypoint-signature": signature(SECRET, stamp, body)}
    assert verify(SECRET, headers, body, now=1780000000 + 299)
    assert not verify(SECRET, headers, body, now=1780000000 + 301)  # a replay, too late
    assert not verify(SECRET, headers, body + b" ", now=1780000000)  # changed on the way
    assert not verify("another", headers, body, now=1780000000)


async def test_a_delivery_an_earlier_segment_started_is_not_sent_again_to_a_chat(
    client: Client, task_queue: str, tmp_path: Path, receivers: Callable[..., Receiver]
) -> None:
    """Started again after a continue-as-new, on a worker whose store never saw it: the first
    send may still be under way in the old segment, so Slack gets nothing more; the webhook's
    receiver deduplicates, so it is sent."""
    hook, chat = await receivers(secret=SECRET).start(), await receivers().start()
    notify = config(tmp_path, hook, chat, None)
    async with worker(client, task_queue, tmp_path, notify):
        slack = await deliver(client, task_queue, notice(), "slack", carried=True)
        webhook = await deliver(client, task_queue, notice(), "hook", carried=True)
    assert slack.status == "unknown" and not chat.requests, slack
    assert webhook.status == "sent" and sum(hook.keys.values()) == 1, webhook
