"""A SQLite file processes share: the console's sessions and sign-ins, a worker's deliveries.

One connection per user of it, in autocommit mode (a change that must see and write at once
opens its own `BEGIN IMMEDIATE`, which SQLite serialises across processes), used under a lock
so the threads of one process take turns. In WAL mode readers do not wait for a writer. The
file must be where every replica reaches it with working locks: one host, or a volume that
is not NFS.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path


class Store:
    """A connection to `path` (in memory when None) and the lock its users take."""

    def __init__(self, path: Path | None, schema: str) -> None:
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.touch(mode=0o600)
        self.db = sqlite3.connect(
            str(path) if path else ":memory:",
            timeout=5.0,
            isolation_level=None,
            check_same_thread=False,  # one connection, used under `lock`
        )
        self.lock = threading.Lock()
        with self.lock:
            if path is not None:
                self.db.execute("PRAGMA journal_mode=WAL")
            self.db.executescript(schema)

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """Read and write as one step, for this process's threads and every other process."""
        with self.lock:
            self.db.execute("BEGIN IMMEDIATE")
            try:
                yield self.db
            except BaseException:
                self.db.execute("ROLLBACK")
                raise
            self.db.execute("COMMIT")
