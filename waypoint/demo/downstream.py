"""The demo's downstream systems: a vendor registry and an email outbox, each a SQLite file.

Both are keyed by the step's effect key, so the registry can answer "was this vendor already
created?" after a crash and a repeated email is queued once. Every call is blocking and short:
one connection, committed explicitly, then closed; the async tools run them in a thread.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

VENDORS_DB = "vendors.sqlite3"
OUTBOX_DB = "outbox.sqlite3"

BeforeCommit = Callable[[], None]
"""Called with the write done but not committed: a crash there must leave no trace."""

_VENDORS_SCHEMA = """
CREATE TABLE IF NOT EXISTS vendors (
    effect_key TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    tax_id TEXT NOT NULL,
    iban TEXT NOT NULL,
    bic TEXT NOT NULL,
    created_at TEXT NOT NULL
)
"""

_OUTBOX_SCHEMA = """
CREATE TABLE IF NOT EXISTS emails (
    effect_key TEXT PRIMARY KEY,
    to_addr TEXT NOT NULL,
    subject TEXT NOT NULL,
    body TEXT NOT NULL,
    queued_at TEXT NOT NULL
)
"""


@contextmanager
def _connect(path: Path, schema: str) -> Iterator[sqlite3.Connection]:
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path, timeout=30)
    try:
        conn.row_factory = sqlite3.Row
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(schema)
        conn.commit()
        yield conn
    finally:
        # Closing without a commit rolls back, as a killed process would.
        conn.close()


def _insert_once(
    db: Path,
    schema: str,
    table: str,
    effect_key: str,
    row: dict[str, Any],
    before_commit: BeforeCommit | None,
) -> dict[str, Any]:
    """Insert `row` under `effect_key` unless a row has that key already; the row committed."""
    columns = ", ".join(["effect_key", *row])
    marks = ", ".join("?" * (len(row) + 1))
    with _connect(db, schema) as conn:
        conn.execute(
            f"INSERT INTO {table} ({columns}) VALUES ({marks}) ON CONFLICT (effect_key) DO NOTHING",
            (effect_key, *row.values()),
        )
        if before_commit is not None:
            before_commit()
        conn.commit()
        return _committed(conn, table, effect_key)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _select(conn: sqlite3.Connection, table: str, effect_key: str) -> dict[str, Any] | None:
    row = conn.execute(f"SELECT * FROM {table} WHERE effect_key = ?", (effect_key,)).fetchone()
    return dict(row) if row is not None else None


def _committed(conn: sqlite3.Connection, table: str, effect_key: str) -> dict[str, Any]:
    row = _select(conn, table, effect_key)
    if row is None:
        raise RuntimeError(f"{table} row {effect_key!r} is missing right after its commit")
    return row


def _count(conn: sqlite3.Connection, table: str, effect_key: str | None) -> int:
    if effect_key is None:
        return conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
    return conn.execute(
        f"SELECT count(*) FROM {table} WHERE effect_key = ?", (effect_key,)
    ).fetchone()[0]


def create_vendor(
    demo_dir: Path,
    effect_key: str,
    *,
    name: str,
    tax_id: str,
    iban: str,
    bic: str,
    before_commit: BeforeCommit | None = None,
) -> dict[str, Any]:
    """Insert a vendor once per effect key; a repeated key returns the existing row unchanged.

    Args:
        demo_dir: Folder holding the registry's SQLite file.
        effect_key: The step's idempotency key, the row's primary key.
        name: Legal name of the supplier.
        tax_id: Its tax id.
        iban: Its IBAN.
        bic: Its BIC.
        before_commit: Test hook run after the insert, before the commit.
    """
    row = {"name": name, "tax_id": tax_id, "iban": iban, "bic": bic, "created_at": _now()}
    return _insert_once(
        demo_dir / VENDORS_DB, _VENDORS_SCHEMA, "vendors", effect_key, row, before_commit
    )


def find_vendor(demo_dir: Path, effect_key: str) -> dict[str, Any] | None:
    """The vendor created under this effect key, or None if there is none: what reconcile asks."""
    with _connect(demo_dir / VENDORS_DB, _VENDORS_SCHEMA) as conn:
        return _select(conn, "vendors", effect_key)


def count_vendors(demo_dir: Path, effect_key: str | None = None) -> int:
    """How many vendor rows exist (for one effect key if given), so tests can prove once-only."""
    with _connect(demo_dir / VENDORS_DB, _VENDORS_SCHEMA) as conn:
        return _count(conn, "vendors", effect_key)


def queue_email(
    demo_dir: Path,
    effect_key: str,
    *,
    to_addr: str,
    subject: str,
    body: str,
    before_commit: BeforeCommit | None = None,
) -> dict[str, Any]:
    """Queue an email once per effect key (`INSERT OR IGNORE`) and return the queued row.

    Args:
        demo_dir: Folder holding the outbox's SQLite file.
        effect_key: The step's idempotency key, the row's primary key.
        to_addr: Recipient address.
        subject: Subject line.
        body: Plain-text body.
        before_commit: Test hook run after the insert, before the commit.
    """
    row = {"to_addr": to_addr, "subject": subject, "body": body, "queued_at": _now()}
    return _insert_once(
        demo_dir / OUTBOX_DB, _OUTBOX_SCHEMA, "emails", effect_key, row, before_commit
    )


def count_emails(demo_dir: Path, effect_key: str | None = None) -> int:
    """How many emails are queued (for one effect key if given), so tests can prove once-only."""
    with _connect(demo_dir / OUTBOX_DB, _OUTBOX_SCHEMA) as conn:
        return _count(conn, "emails", effect_key)
