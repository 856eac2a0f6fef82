"""Real receivers on loopback for notices: HTTP (webhook, Slack, Teams) and SMTP (aiosmtpd).

The HTTP receiver is a small HTTP/1.1 server on a socket of its own: it records each request,
checks a webhook's signature as docs/notifications.md tells a receiver to, counts each notice
key once, and can refuse (503), hang up without answering, or hold requests until released.
`NotifyProbe` is a workflow that delivers one notice through `waypoint.notify` with the retry
policy a test gives, as the agent workflow does with its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import socket
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import timedelta
from email.message import Message
from email.parser import BytesParser
from typing import Any

from aiosmtpd.controller import Controller
from temporalio import workflow
from temporalio.common import RetryPolicy

from waypoint.protocol.base import _Frozen
from waypoint.protocol.notices import (
    NOTIFY,
    NOTIFY_HEARTBEAT,
    NOTIFY_TIMEOUT,
    Delivery,
    Notice,
    NoticeRequest,
)


def verify(secret: str, headers: dict[str, str], body: bytes, now: float) -> bool:
    """Whether a Waypoint webhook is genuine and fresh (headers' names in lower case)."""
    stamp = headers.get("waypoint-timestamp", "")
    if not stamp.isdigit() or abs(now - int(stamp)) > 300:  # older than 5 minutes: a replay
        return False
    signed = stamp.encode() + b"." + body
    want = "v1=" + hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()
    return hmac.compare_digest(want, headers.get("waypoint-signature", ""))


@dataclass
class Received:
    """One request the receiver read."""

    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        """The body as JSON."""
        return json.loads(self.body)


@dataclass
class Receiver:
    """An HTTP receiver on 127.0.0.1; `secret` set: a webhook's, whose signature it checks."""

    secret: str = ""
    fail: int = 0
    """Answer 503 to this many requests before answering 200."""
    hang_up: int = 0
    """Read this many requests, then close the connection without an answer."""
    holding: bool = False
    """Keep each request unanswered until `release()` (a worker can be killed meanwhile)."""
    requests: list[Received] = field(default_factory=list)
    keys: Counter[str] = field(default_factory=Counter)
    """Each verified notice key, counted once: a receiver deduplicates on it."""
    forged: int = 0
    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    _released: asyncio.Event = field(default_factory=asyncio.Event)
    _server: asyncio.Server | None = None
    port: int = 0

    @property
    def url(self) -> str:
        """Its address."""
        return f"http://127.0.0.1:{self.port}/hook"

    async def start(self, port: int = 0) -> Receiver:
        """Listen (again, on the same port after `stop`)."""
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", port or self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        """Stop listening: a sender's connection is refused."""
        if self._server is not None:
            self._server.close()
            self._released.set()
            await self._server.wait_closed()
            self._server = None

    def release(self) -> None:
        """Answer the requests held so far, and every later one at once."""
        self.holding = False
        self._released.set()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")[1:]
            headers = {
                k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in lines if x)
            }
            body = await reader.readexactly(int(headers.get("content-length", "0")))
            self.requests.append(Received(headers, body))
            self.arrived.set()
            status = self._judge(headers, body)
            if self.holding:
                await self._released.wait()
            if self.hang_up:
                self.hang_up -= 1
                writer.close()
                return
            writer.write(
                f"HTTP/1.1 {status}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n".encode()
            )
            await writer.drain()
        writer.close()

    def _judge(self, headers: dict[str, str], body: bytes) -> str:
        if self.fail:
            self.fail -= 1
            return "503 Service Unavailable"
        if self.secret:
            if not verify(self.secret, headers, body, time.time()):
                self.forged += 1
                return "401 Unauthorized"
            self.keys[headers["waypoint-key"]] = 1
        return "200 OK"


class Mailbox:
    """An SMTP server (aiosmtpd) on 127.0.0.1 that keeps every message it accepts."""

    def __init__(self) -> None:
        self.messages: list[Message] = []
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self._controller = Controller(self, hostname="127.0.0.1", port=self.port)

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:  # noqa: N802
        """Keep the message (aiosmtpd's handler hook)."""
        self.messages.append(BytesParser().parsebytes(envelope.content))
        return "250 OK"

    def __enter__(self) -> Mailbox:
        self._controller.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._controller.stop()


class Probe(_Frozen):
    """One notice to deliver, with the retry policy to deliver it under."""

    request: NoticeRequest
    attempts: int = 3
    retry_seconds: float = 0.2
    queue: str = ""
    """The queue the notify activity is polled on; empty: the probe's own."""


@workflow.defn(name="NotifyProbe")
class NotifyProbe:
    """Delivers one notice through `waypoint.notify`, as the agent workflow does."""

    @workflow.run
    async def run(self, probe: Probe) -> Delivery:
        """The delivery the activity reports."""
        return await workflow.execute_activity(
            NOTIFY,
            probe.request,
            result_type=Delivery,
            task_queue=probe.queue or None,
            start_to_close_timeout=NOTIFY_TIMEOUT,
            heartbeat_timeout=NOTIFY_HEARTBEAT,
            retry_policy=RetryPolicy(
                initial_interval=timedelta(seconds=probe.retry_seconds),
                backoff_coefficient=1.0,
                maximum_attempts=probe.attempts,
            ),
        )


def channels(hook: Receiver, console: str = "http://console.test") -> str:
    """A notifications file's console and two channels: `hook` (signed) and `slack`."""
    return f"""
[console]
url = "{console}"

[channels.hook]
type = "webhook"
url = "{hook.url}"
secret_env = "HOOK_SECRET"

[channels.slack]
type = "slack"
url_env = "SLACK_URL"
"""


def notice(run: str = "run-1", event: str = "waiting", n: int = 1, **fields: Any) -> Notice:
    """A notice about `payer`'s `pay` call waiting for approval."""
    given = {
        "key": f"{run}/t1.tool.1.pay/{event}/{n}",
        "event": event,
        "kind": "approval",
        "agent": "payer",
        "run": run,
        "step_id": "t1.tool.1.pay",
        "tool": "pay",
        "arguments": {"payee": "ada", "amount": 1280},
        "since": "2026-03-03T14:05:00+00:00",
        "role": "approver",
        "rule": "amount over 1000",
        "cost_usd": 0.0123,
        **fields,
    }
    return Notice.model_validate(given)
