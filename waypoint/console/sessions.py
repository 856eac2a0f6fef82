"""Signed-in browsers: a signed, expiring session cookie, its CSRF token, sign-in throttling.

A session is a cookie signed with the console's secret (itsdangerous): the person's name, how
they signed in, when, a random CSRF token that every form and cookie-authenticated POST must
send back, and for a password the generation of the hash it was checked against (a changed
password ends every session made with the old one). Roles are not in it: they are read from
the users file on every request, so taking a role away applies at once. Signing out revokes
the session in this process. Nothing secret is in it: it is signed, not encrypted.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from itsdangerous import BadSignature, URLSafeTimedSerializer

COOKIE = "waypoint_session"
SESSION_SECONDS = 8 * 3600
SIGN_IN_TRIES = 5
SIGN_IN_WINDOW = 300.0
ONCE_SECONDS = 15 * 60


@dataclass(frozen=True)
class Session:
    """What a session cookie says."""

    user: str
    via: str
    csrf: str
    """Also the session's id: signing out revokes it."""
    generation: str = ""


def generation(stored_hash: str) -> str:
    """A short digest of a password hash: sessions made before a change of it no longer hold."""
    return hashlib.sha256(stored_hash.encode()).hexdigest()[:16]


class Sessions:
    """Makes and reads session cookies."""

    def __init__(self, secret: str, max_age: int = SESSION_SECONDS) -> None:
        self.secret = secret
        self._revoked: dict[str, float] = {}
        self._serializer = URLSafeTimedSerializer(secret, salt="waypoint-console-session")
        self.max_age = max_age

    def cookie(self, user: str, via: str, generation: str = "") -> str:
        """A new session's cookie value, with a fresh CSRF token."""
        data = {"u": user, "v": via, "c": secrets.token_urlsafe(24), "g": generation}
        return self._serializer.dumps(data)

    def read(self, value: str | None) -> Session | None:
        """The session a cookie holds; None when it is absent, forged, expired or revoked."""
        if not value:
            return None
        try:
            data: Any = self._serializer.loads(value, max_age=self.max_age)
        except BadSignature:
            return None
        if not isinstance(data, dict) or not all(isinstance(data.get(k), str) for k in "uvcg"):
            return None
        if data["c"] in self._revoked:
            return None
        return Session(user=data["u"], via=data["v"], csrf=data["c"], generation=data["g"])

    def revoke(self, session: Session) -> None:
        """End a session now (sign-out), in this process; it would expire anyway."""
        now = time.monotonic()
        self._revoked = {c: t for c, t in self._revoked.items() if now - t < self.max_age}
        self._revoked[session.csrf] = now


def csrf_ok(session: Session, sent: str | None) -> bool:
    """Whether a form or header sent back the session's CSRF token.

    Compared as bytes: `hmac.compare_digest` refuses a `str` holding anything but ASCII, and
    a header or form field may hold anything.
    """
    if not sent:
        return False
    return hmac.compare_digest(session.csrf.encode(), str(sent).encode("utf-8", "surrogatepass"))


@dataclass
class Throttle:
    """At most `tries` sign-in attempts per name and per address within `window` seconds.

    An attempt is counted (reserved) before its password is checked, so a burst of concurrent
    guesses cannot all pass the check while the first hashes run; a success gives its
    reservation back, a failure keeps it.
    """

    tries: int = SIGN_IN_TRIES
    window: float = SIGN_IN_WINDOW
    _failures: dict[str, deque[float]] = field(default_factory=dict)

    def wait(self, *keys: str) -> float:
        """Seconds until any of `keys` may try again (0: now)."""
        now = time.monotonic()
        longest = 0.0
        for key in keys:
            seen = self._failures.get(key)
            while seen and now - seen[0] > self.window:
                seen.popleft()
            if seen and len(seen) >= self.tries:
                longest = max(longest, self.window - (now - seen[0]))
        return longest

    def reserve(self, *keys: str) -> tuple[float, float]:
        """Count an attempt against each key now: (seconds to wait, 0 when refused; its stamp).

        Nothing awaits between the check and the count, so no two attempts see the same room.
        """
        wait = self.wait(*keys)
        if wait > 0:
            return wait, 0.0
        now = time.monotonic()
        if len(self._failures) > 10_000:  # a flood: forget what the window forgets anyway
            held = self._failures.items()
            self._failures = {k: seen for k, seen in held if seen and now - seen[-1] <= self.window}
        for key in keys:
            self._failures.setdefault(key, deque(maxlen=self.tries)).append(now)
        return 0.0, now

    def release(self, stamp: float, *keys: str) -> None:
        """Give back a reserved attempt that succeeded."""
        for key in keys:
            seen = self._failures.get(key)
            if seen and stamp in seen:
                seen.remove(stamp)


@dataclass
class OneTimeSignIns:
    """Links that sign someone in once, soon (`waypoint demo` prints one)."""

    ttl: float = ONCE_SECONDS
    _open: dict[str, tuple[str, float]] = field(default_factory=dict)

    def issue(self, user: str) -> str:
        """A token that signs `user` in once within `ttl` seconds."""
        token = secrets.token_urlsafe(24)
        self._open[token] = (user, time.monotonic() + self.ttl)
        return token

    def redeem(self, token: str) -> str | None:
        """The user the token signs in, once; None if unknown, used or expired."""
        user, until = self._open.pop(token, ("", 0.0))
        return user if user and time.monotonic() < until else None


def load_secret(path: Path) -> str:
    """The console's cookie-signing secret, made on first use and kept owner-readable only."""
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
