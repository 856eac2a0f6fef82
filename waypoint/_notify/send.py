"""Sending one message to one channel, and telling a failure that sent nothing from one that may.

A receiver that refuses (an HTTP status, an SMTP reply code) or that could not be reached sent
nothing: the notice may be sent again. One that was sent the message and then went quiet (a
read timeout, a dropped connection mid-reply) may have delivered it: a channel that cannot
deduplicate (Slack, Teams, e-mail) must not send it again. `SendFailed.sent_nothing` says which.

The generic webhook is signed so a receiver can check it came from us, unchanged and recently:
`Waypoint-Signature: v1=<hex>` is HMAC-SHA256, keyed with the channel's secret, over
`{Waypoint-Timestamp}.{body}` (the timestamp in whole seconds since the epoch, the body's raw
bytes); `Waypoint-Key` is the notice key to deduplicate on.
"""

from __future__ import annotations

import hashlib
import hmac
import smtplib
import ssl
import time
from email.message import EmailMessage

import httpx

from waypoint._notify.config import Channel, EmailEntry

TIMEOUT = 10.0
"""Seconds to connect to a receiver, and to wait for its answer."""


class SendFailed(Exception):
    """The message was not delivered; `sent_nothing`: certainly not, so a retry may resend."""

    def __init__(self, detail: str, *, sent_nothing: bool, permanent: bool = False) -> None:
        super().__init__(detail)
        self.sent_nothing = sent_nothing
        self.permanent = permanent
        """Sending again cannot help (a 4xx other than 408/429: a wrong address or format)."""


def signature(secret: str, timestamp: str, body: bytes) -> str:
    """`v1=<hex>`: HMAC-SHA256 over `{timestamp}.{body}` keyed with the channel's secret."""
    digest = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return "v1=" + digest.hexdigest()


def webhook_headers(channel: Channel, key: str, body: bytes) -> dict[str, str]:
    """The generic webhook's headers: its key, when it was signed, and the signature."""
    stamp = str(int(time.time()))
    return {
        "content-type": "application/json",
        "waypoint-key": key,
        "waypoint-timestamp": stamp,
        "waypoint-signature": signature(channel.secret, stamp, body),
    }


async def post(url: str, body: bytes, headers: dict[str, str]) -> None:
    """POST `body`; a 2xx answer delivered it.

    Raises:
        SendFailed: Not delivered (`sent_nothing` when the receiver refused or was unreachable).
    """
    headers = {"content-type": "application/json", **headers}
    try:
        async with httpx.AsyncClient(timeout=TIMEOUT, follow_redirects=False) as http:
            answer = await http.post(url, content=body, headers=headers)
    except (httpx.ConnectError, httpx.ConnectTimeout) as err:
        raise SendFailed(f"not reachable: {type(err).__name__}", sent_nothing=True) from None
    except httpx.HTTPError as err:  # sent, then no whole answer: it may have arrived
        raise SendFailed(f"no answer: {type(err).__name__}", sent_nothing=False) from None
    if not answer.is_success:
        code = answer.status_code
        permanent = 400 <= code < 500 and code not in (408, 429)
        raise SendFailed(f"refused: HTTP {code}", sent_nothing=True, permanent=permanent)


def send_mail(channel: Channel, message: EmailMessage) -> None:
    """Send `message` over SMTP (blocking: run it in a thread).

    Raises:
        SendFailed: Not delivered (`sent_nothing` unless the server went quiet mid-message).
    """
    entry = channel.entry
    assert isinstance(entry, EmailEntry)
    sending = False
    try:
        with smtplib.SMTP(entry.host, entry.port, timeout=TIMEOUT) as smtp:
            if entry.starttls:
                smtp.starttls(context=ssl.create_default_context())
            if channel.user:
                smtp.login(channel.user, channel.secret)
            sending = True
            smtp.send_message(message, from_addr=entry.sender, to_addrs=list(entry.to))
    except smtplib.SMTPResponseException as err:  # the server answered no: nothing was sent
        permanent = 500 <= err.smtp_code < 600
        raise SendFailed(
            f"refused: SMTP {err.smtp_code}", sent_nothing=True, permanent=permanent
        ) from None
    except smtplib.SMTPRecipientsRefused:
        raise SendFailed("refused: every recipient", sent_nothing=True, permanent=True) from None
    except (TimeoutError, smtplib.SMTPException, OSError) as err:
        raise SendFailed(
            f"{'no answer' if sending else 'not reachable'}: {type(err).__name__}",
            sent_nothing=not sending,
        ) from None
