"""Signed-in browsers: server-side sessions behind a signed cookie, CSRF tokens, throttling.

A session is a row in the SQLite file every replica of the console reads (`store.Store`); the
cookie holds only its random id, signed with the console's secret (itsdangerous), so a forged
one costs no lookup. The row says who, how they signed in, a random CSRF token that every form
and cookie-authenticated POST must send back, and for a password the generation of the hash
it was checked against (a changed password ends every session made with the old one). Roles
are not in it: they are read from the users file on every request. Signing out deletes the
row, so it holds across restarts and replicas; a session ends after `max_age` seconds, or
after `idle` seconds without a request (watching an event stream is not one).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from itsdangerous import BadSignature, URLSafeTimedSerializer

from waypoint._notify.links import LINK_SECONDS
from waypoint.stores.sqlite import Store

COOKIE = "waypoint_session"
SESSION_SECONDS = 8 * 3600
IDLE_SECONDS = 30 * 60
TOUCH_SECONDS = 30.0
"""A session's last-seen time is written at most this often: reads stay reads."""
SIGN_IN_TRIES = 5
SIGN_IN_WINDOW = 300.0
ONCE_SECONDS = 15 * 60
SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY, user TEXT NOT NULL, via TEXT NOT NULL, csrf TEXT NOT NULL,
    generation TEXT NOT NULL, created REAL NOT NULL, seen REAL NOT NULL
);
"""
USED_LINKS = "CREATE TABLE IF NOT EXISTS used_links (nonce TEXT PRIMARY KEY, at REAL NOT NULL);"
ATTEMPTS = """
CREATE TABLE IF NOT EXISTS attempts (key TEXT NOT NULL, at REAL NOT NULL);
CREATE INDEX IF NOT EXISTS attempts_by_key ON attempts (key, at);
"""


@dataclass(frozen=True)
class Session:
    """A signed-in browser's session, as its row says."""

    user: str
    via: str
    csrf: str
    generation: str = ""
    id: str = ""
    """Signing out deletes the row it names."""


def generation(stored_hash: str) -> str:
    """A short digest of a password hash: sessions made before a change of it no longer hold."""
    return hashlib.sha256(stored_hash.encode()).hexdigest()[:16]


class Sessions:
    """Makes, reads and ends sessions, kept in SQLite at `store` (in memory when None).

    Every replica behind one address (and the same console after a restart) must use the same
    `store` file and secret: a file on one host, or a volume whose locks work (not NFS).
    """

    def __init__(
        self,
        secret: str,
        max_age: int = SESSION_SECONDS,
        *,
        store: Path | None = None,
        idle: float = IDLE_SECONDS,
    ) -> None:
        self.secret = secret
        self._serializer = URLSafeTimedSerializer(secret, salt="waypoint-console-session")
        self.max_age = max_age
        self.idle = idle
        self._store = Store(store, SCHEMA)
        self._db, self._lock = self._store.db, self._store.lock

    def cookie(self, user: str, via: str, generation: str = "") -> str:
        """A new session's cookie value: its row is written, with a fresh CSRF token."""
        now = time.time()
        sid, csrf = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
        with self._lock:
            self._db.execute(
                "DELETE FROM sessions WHERE created < ? OR seen < ?",
                (now - self.max_age, now - self.idle),
            )
            self._db.execute(
                "INSERT INTO sessions VALUES (?, ?, ?, ?, ?, ?, ?)",
                (sid, user, via, csrf, generation, now, now),
            )
        return self._serializer.dumps({"s": sid})

    def read(self, value: str | None, *, touch: bool = True) -> Session | None:
        """The session a cookie names; None when absent, forged, expired, idle or ended.

        `touch`: the request counts as activity (an event stream's re-check does not).
        """
        if not value:
            return None
        try:
            data: Any = self._serializer.loads(value, max_age=self.max_age)
        except BadSignature:
            return None
        if not isinstance(data, dict) or not isinstance(data.get("s"), str):
            return None
        now = time.time()
        with self._lock:
            row = self._db.execute(
                "SELECT user, via, csrf, generation, created, seen FROM sessions WHERE id = ?",
                (data["s"],),
            ).fetchone()
            if row is None:
                return None
            user, via, csrf, made, created, seen = row
            if now - created > self.max_age or now - seen > self.idle:
                self._db.execute("DELETE FROM sessions WHERE id = ?", (data["s"],))
                return None
            if touch and now - seen > TOUCH_SECONDS:
                self._db.execute("UPDATE sessions SET seen = ? WHERE id = ?", (now, data["s"]))
        return Session(user=user, via=via, csrf=csrf, generation=made, id=data["s"])

    def revoke(self, session: Session) -> None:
        """End a session now (sign-out), for every replica and across restarts."""
        with self._lock:
            self._db.execute("DELETE FROM sessions WHERE id = ?", (session.id,))


def csrf_ok(session: Session, sent: str | None) -> bool:
    """Whether a form or header sent back the session's CSRF token.

    Compared as bytes: `hmac.compare_digest` refuses a `str` holding anything but ASCII, and
    a header or form field may hold anything.
    """
    if not sent:
        return False
    return hmac.compare_digest(session.csrf.encode(), str(sent).encode("utf-8", "surrogatepass"))


class Throttle:
    """At most `tries` sign-in attempts per name and per address within `window` seconds.

    An attempt is counted (reserved) before its password is checked, so a burst of concurrent
    guesses cannot all pass the check while the first hashes run; a success gives its
    reservation back, a failure keeps it. The count lives in `store` (in memory when None),
    the sessions file every replica shares, so replicas do not multiply the limit.
    """

    def __init__(
        self,
        tries: int = SIGN_IN_TRIES,
        window: float = SIGN_IN_WINDOW,
        *,
        store: Path | None = None,
    ) -> None:
        self.tries = tries
        self.window = window
        self._store = Store(store, ATTEMPTS)

    def reserve(self, *keys: str) -> tuple[float, float]:
        """Count an attempt against each key now: (seconds to wait, 0 when refused; its stamp).

        The check and the count are one transaction, so no two attempts see the same room.
        """
        now = time.time()
        with self._store.transaction() as db:
            db.execute("DELETE FROM attempts WHERE at < ?", (now - self.window,))
            wait = 0.0
            for key in keys:
                count, first = db.execute(
                    "SELECT COUNT(*), MIN(at) FROM attempts WHERE key = ?", (key,)
                ).fetchone()
                if count >= self.tries:
                    wait = max(wait, self.window - (now - first))
            if wait > 0:
                return wait, 0.0
            db.executemany("INSERT INTO attempts VALUES (?, ?)", [(key, now) for key in keys])
        return 0.0, now

    def release(self, stamp: float, *keys: str) -> None:
        """Give back a reserved attempt that succeeded."""
        with self._store.transaction() as db:
            for key in keys:
                db.execute(
                    "DELETE FROM attempts WHERE rowid IN "
                    "(SELECT rowid FROM attempts WHERE key = ? AND at = ? LIMIT 1)",
                    (key, stamp),
                )


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


class UsedLinks:
    """Nonces of review links already used, in the sessions file (in memory when None)."""

    def __init__(self, store: Path | None = None) -> None:
        self._store = Store(store, USED_LINKS)

    def burn(self, nonce: str) -> bool:
        """Mark `nonce` used; False if it was already (one transaction: one winner)."""
        now = time.time()
        with self._store.transaction() as db:
            db.execute("DELETE FROM used_links WHERE at < ?", (now - 2 * LINK_SECONDS,))
            if db.execute("SELECT 1 FROM used_links WHERE nonce = ?", (nonce,)).fetchone():
                return False
            db.execute("INSERT INTO used_links VALUES (?, ?)", (nonce, now))
        return True
