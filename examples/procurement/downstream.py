"""The procurement downstream: purchase orders and the supplier-check audit log, in SQLite.

Both tables are keyed by the step's effect key (a unique column), so a retried step writes once
and "was this order placed?" has an answer after a crash. Each call opens one connection,
commits explicitly and closes it; the tools run them in a thread.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ORDERS_DB = "orders.sqlite3"
CHECKS_DB = "supplier_checks.sqlite3"

_ORDERS = """
CREATE TABLE IF NOT EXISTS purchase_orders (
    effect_key TEXT PRIMARY KEY,
    sku TEXT NOT NULL,
    supplier TEXT NOT NULL,
    supplier_country TEXT NOT NULL,
    quantity INTEGER NOT NULL,
    unit_price_eur REAL NOT NULL,
    total_eur REAL NOT NULL,
    deliver_by TEXT NOT NULL,
    placed_at TEXT NOT NULL
)
"""

_CHECKS = """
CREATE TABLE IF NOT EXISTS supplier_checks (
    effect_key TEXT PRIMARY KEY,
    supplier TEXT NOT NULL,
    country TEXT NOT NULL,
    verdict TEXT NOT NULL,
    reason TEXT NOT NULL,
    checked_at TEXT NOT NULL
)
"""


@contextmanager
def _connect(path: Path, schema: str) -> Iterator[sqlite3.Connection]:
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path, timeout=30)
    try:
        conn.row_factory = sqlite3.Row
        conn.execute(schema)
        conn.commit()
        yield conn
    finally:
        conn.close()  # without a commit: rolled back, as a killed process would


def _insert(
    path: Path,
    schema: str,
    table: str,
    row: dict[str, Any],
    before_commit: Callable[[], None] | None,
) -> dict[str, Any]:
    with _connect(path, schema) as conn:
        columns = ", ".join(row)
        marks = ", ".join(f":{c}" for c in row)
        conn.execute(f"INSERT OR IGNORE INTO {table} ({columns}) VALUES ({marks})", row)
        if before_commit is not None:
            before_commit()
        conn.commit()
        found = conn.execute(
            f"SELECT * FROM {table} WHERE effect_key = ?", (row["effect_key"],)
        ).fetchone()
        return dict(found)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def place_order(
    folder: Path, effect_key: str, order: dict[str, Any], before_commit: Callable[[], None] | None
) -> dict[str, Any]:
    """Insert the purchase order once per effect key; a repeated key returns the first row."""
    row = {"effect_key": effect_key, **order, "placed_at": _now()}
    return _insert(folder / ORDERS_DB, _ORDERS, "purchase_orders", row, before_commit)


def find_order(folder: Path, effect_key: str) -> dict[str, Any] | None:
    """The order placed under this key, or None: what reconcile asks."""
    with _connect(folder / ORDERS_DB, _ORDERS) as conn:
        row = conn.execute(
            "SELECT * FROM purchase_orders WHERE effect_key = ?", (effect_key,)
        ).fetchone()
        return dict(row) if row is not None else None


def record_check(
    folder: Path, effect_key: str, check: dict[str, Any], before_commit: Callable[[], None] | None
) -> dict[str, Any]:
    """Record a supplier check's verdict once per effect key."""
    row = {"effect_key": effect_key, **check, "checked_at": _now()}
    return _insert(folder / CHECKS_DB, _CHECKS, "supplier_checks", row, before_commit)


def count_effects(folder: Path, effect_key: str) -> int:
    """Rows written under a step's key: its own, and its sub-agent's (keys below it)."""
    below = f"{effect_key}/%"
    total = 0
    for db, schema, table in (
        (ORDERS_DB, _ORDERS, "purchase_orders"),
        (CHECKS_DB, _CHECKS, "supplier_checks"),
    ):
        with _connect(folder / db, schema) as conn:
            total += conn.execute(
                f"SELECT count(*) FROM {table} WHERE effect_key = ? OR effect_key LIKE ?",
                (effect_key, below),
            ).fetchone()[0]
    return total


def count_orders(folder: Path) -> int:
    """Every purchase order placed, for tests and the README."""
    with _connect(folder / ORDERS_DB, _ORDERS) as conn:
        return conn.execute("SELECT count(*) FROM purchase_orders").fetchone()[0]
