"""The demo's downstream systems: a vendor registry and an email outbox, each a SQLite file.

Both are keyed by the step's effect key, so the registry can answer "was this vendor already
created?" after a crash and a repeated email is queued once. Every call is blocking and short:
one connection, committed explicitly, then closed; the async tools run them in a thread.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

BeforeCommit = Callable[[], None]
"""Called with the write done but not committed: a crash there must leave no trace."""


@dataclass(frozen=True)
class Table:
    """One table in its own SQLite file, its rows keyed by the step's effect key."""

    file: str
    name: str
    columns: tuple[str, ...]
    stamp: str
    """The column that records when the row was written."""

    @contextmanager
    def _connect(self, demo_dir: Path) -> Iterator[sqlite3.Connection]:
        demo_dir.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(demo_dir / self.file, timeout=30)
        try:
            conn.row_factory = sqlite3.Row
            conn.execute("PRAGMA journal_mode=WAL")
            columns = "".join(f", {c} TEXT NOT NULL" for c in (*self.columns, self.stamp))
            conn.execute(
                f"CREATE TABLE IF NOT EXISTS {self.name} (effect_key TEXT PRIMARY KEY{columns})"
            )
            conn.commit()
            yield conn
        finally:
            # Closing without a commit rolls back, as a killed process would.
            conn.close()

    def insert_once(
        self,
        demo_dir: Path,
        effect_key: str,
        row: dict[str, Any],
        before_commit: BeforeCommit | None,
    ) -> dict[str, Any]:
        """Insert `row` (with its stamp) under `effect_key` unless a row has that key already.

        Returns the row committed under the key: a repeated key's, unchanged. `before_commit`
        runs with the insert done but not committed.
        """
        if set(row) != set(self.columns):
            raise ValueError(f"a {self.name} row has the columns {', '.join(self.columns)}")
        row = {**row, self.stamp: datetime.now(UTC).isoformat(timespec="seconds")}
        marks = ", ".join("?" * (len(row) + 1))
        with self._connect(demo_dir) as conn:
            conn.execute(
                f"INSERT INTO {self.name} (effect_key, {', '.join(row)}) VALUES ({marks}) "
                "ON CONFLICT (effect_key) DO NOTHING",
                (effect_key, *row.values()),
            )
            if before_commit is not None:
                before_commit()
            conn.commit()
            committed = self._select(conn, effect_key)
        if committed is None:
            raise RuntimeError(f"{self.name} row {effect_key!r} is missing right after its commit")
        return committed

    def find(self, demo_dir: Path, effect_key: str) -> dict[str, Any] | None:
        """The row under this effect key, or None."""
        with self._connect(demo_dir) as conn:
            return self._select(conn, effect_key)

    def count(self, demo_dir: Path, effect_key: str | None = None) -> int:
        """How many rows exist (under one effect key if given), so tests can prove once-only."""
        where, args = ("", ()) if effect_key is None else (" WHERE effect_key = ?", (effect_key,))
        with self._connect(demo_dir) as conn:
            return conn.execute(f"SELECT count(*) FROM {self.name}{where}", args).fetchone()[0]

    def _select(self, conn: sqlite3.Connection, effect_key: str) -> dict[str, Any] | None:
        query = f"SELECT * FROM {self.name} WHERE effect_key = ?"
        row = conn.execute(query, (effect_key,)).fetchone()
        return dict(row) if row is not None else None


VENDORS = Table("vendors.sqlite3", "vendors", ("name", "tax_id", "iban", "bic"), "created_at")
"""The vendor registry: `find` is what the create tool's reconcile asks."""
OUTBOX = Table("outbox.sqlite3", "emails", ("to_addr", "subject", "body"), "queued_at")
"""The email outbox."""

find_vendor = VENDORS.find
count_vendors = VENDORS.count
count_emails = OUTBOX.count
