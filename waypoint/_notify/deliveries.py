"""What this host has sent, per notice key and channel: at most one chat message or e-mail.

Before a send the row says `sending`, after it `sent`. A retry (after a crash, a timeout, a
worker killed mid-send) that finds `sent` sends nothing; one that finds `sending` and no
`sent` cannot know whether the message left: it sends again only to a channel whose receiver
deduplicates on the key (the generic webhook). A send that surely sent nothing (refused,
unreachable) removes its row, so a retry sends. The file lives beside the attempt journal, on
a local disk; workers that share it (one host) share the promise, and a worker on another host
keeps its own.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Literal

from waypoint.stores.sqlite import Store

KEEP_SECONDS = 30 * 24 * 3600
"""Rows older than this are dropped when the file is opened: a notice is not retried so late."""
SCHEMA = """
CREATE TABLE IF NOT EXISTS deliveries (
    key TEXT NOT NULL, channel TEXT NOT NULL, state TEXT NOT NULL, at REAL NOT NULL,
    PRIMARY KEY (key, channel)
);
"""
State = Literal["sending", "sent"]


class Deliveries:
    """The delivery rows in SQLite at `path` (in memory when None)."""

    def __init__(self, path: Path | None) -> None:
        self._store = Store(path, SCHEMA)
        with self._store.transaction() as db:
            db.execute("DELETE FROM deliveries WHERE at < ?", (time.time() - KEEP_SECONDS,))

    def begin(self, key: str, channel: str) -> State | None:
        """The row's state before this attempt; a missing row is written `sending` first."""
        with self._store.transaction() as db:
            row = db.execute(
                "SELECT state FROM deliveries WHERE key = ? AND channel = ?", (key, channel)
            ).fetchone()
            if row is None:
                db.execute(
                    "INSERT INTO deliveries VALUES (?, ?, 'sending', ?)",
                    (key, channel, time.time()),
                )
        return row[0] if row else None

    def sent(self, key: str, channel: str) -> None:
        """The message left: a retry sends nothing."""
        with self._store.lock:
            self._store.db.execute(
                "UPDATE deliveries SET state = 'sent', at = ? WHERE key = ? AND channel = ?",
                (time.time(), key, channel),
            )

    def forget(self, key: str, channel: str) -> None:
        """Surely nothing was sent: a retry may send."""
        with self._store.lock:
            self._store.db.execute(
                "DELETE FROM deliveries WHERE key = ? AND channel = ?", (key, channel)
            )
