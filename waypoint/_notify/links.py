"""Review links: a notice's link to the run page that signs its person in once.

The worker signs a link with the console's secret (`WAYPOINT_CONSOLE_SECRET`, the file both
read); the console's `GET /r/{token}` checks the signature and age, burns the token's nonce
(a second use is refused, on every replica sharing the sessions file), signs the person in and
lands on the run page. A link is bound to the run and step it is about, and to the person its
channel reaches (`person` in the notifications file): a link posted to a shared channel names
nobody and only opens the run page behind the usual sign-in, since anyone there could use it.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from itsdangerous import BadSignature, SignatureExpired, URLSafeTimedSerializer

from waypoint.protocol.notices import Notice

LINK_SECONDS = 3 * 24 * 3600
"""A review link holds this long: a reminder or escalation sends a fresh one."""
SALT = "waypoint-review-link"


def load_secret(path: Path) -> str:
    """The console's signing secret, made on first use and kept owner-readable only."""
    try:
        secret = path.read_text().strip()
        if secret:
            return secret
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    secret = secrets.token_urlsafe(32)
    path.touch(mode=0o600)
    path.write_text(secret)
    return secret


@dataclass(frozen=True)
class ReviewClaim:
    """What a good review link says: whom it signs in (if anyone), and which call."""

    run: str
    step: str
    person: str
    """Empty for a shared channel's link: it signs nobody in."""
    nonce: str


def _serializer(secret: str) -> URLSafeTimedSerializer:
    return URLSafeTimedSerializer(secret, salt=SALT)


def review_link(console_url: str, secret: str, notice: Notice, person: str | None) -> str:
    """The link a notice carries: `{console_url}/r/{token}` (a fresh nonce each time)."""
    claim = {"r": notice.run, "s": notice.step_id, "p": person or "", "n": secrets.token_hex(8)}
    return f"{console_url}/r/{_serializer(secret).dumps(claim)}"


def read_link(secret: str, token: str, max_age: int = LINK_SECONDS) -> ReviewClaim | str:
    """The claim a token holds, or why it is refused (forged, expired, malformed)."""
    try:
        data: Any = _serializer(secret).loads(token, max_age=max_age)
    except SignatureExpired:
        return "this review link has expired: use the newest notice, or sign in"
    except BadSignature:
        return "this review link is not valid: it was changed or is from another console"
    fields = ("r", "s", "p", "n")
    if not isinstance(data, dict) or not all(isinstance(data.get(k), str) for k in fields):
        return "this review link is not valid: it was changed or is from another console"
    return ReviewClaim(run=data["r"], step=data["s"], person=data["p"], nonce=data["n"])
