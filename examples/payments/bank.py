"""A small bank in one SQLite file: balances, and payments keyed by an idempotency key.

Each call opens the file, commits and closes it: no connection is held, so the module can be
imported by any process (a worker, the demo, a test) and by a worker started again after a kill.
`down` simulates an outage: while it is set the bank answers nothing, so a payment's outcome
cannot be confirmed (`python -m examples.payments.bank down|up`).
"""

from __future__ import annotations

import os
import sqlite3
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

DEFAULT_PATH = ".waypoint/bank.sqlite3"
OPENING_BALANCE_CENTS = 5_000_00

_SCHEMA = """
CREATE TABLE IF NOT EXISTS accounts (name TEXT PRIMARY KEY, balance_cents INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS payments (
    idempotency_key TEXT PRIMARY KEY,
    payee TEXT NOT NULL,
    amount_cents INTEGER NOT NULL,
    paid_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS outage (down INTEGER NOT NULL);
INSERT OR IGNORE INTO accounts VALUES ('operating', 500000);
"""


class BankUnavailable(RuntimeError):
    """The bank does not answer: nobody can say whether a payment went through."""


class Bank:
    """The downstream system of the payments example."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def from_env(cls) -> Bank:
        """The bank file named by `WAYPOINT_BANK`, or `.waypoint/bank.sqlite3`."""
        return cls(Path(os.environ.get("WAYPOINT_BANK", DEFAULT_PATH)))

    @contextmanager
    def _db(self) -> Iterator[sqlite3.Connection]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self.path, timeout=30)
        try:
            conn.row_factory = sqlite3.Row
            conn.executescript(_SCHEMA)
            yield conn
        finally:
            conn.close()

    def _check_up(self, conn: sqlite3.Connection) -> None:
        if conn.execute("SELECT 1 FROM outage WHERE down = 1").fetchone():
            raise BankUnavailable("the bank is not answering")

    def balance(self, account: str) -> int:
        """The account's balance in cents."""
        with self._db() as conn:
            self._check_up(conn)
            row = conn.execute(
                "SELECT balance_cents FROM accounts WHERE name = ?", (account,)
            ).fetchone()
        if row is None:
            raise KeyError(f"no account {account!r}")
        return row[0]

    def pay(self, idempotency_key: str, payee: str, amount_cents: int) -> dict[str, Any]:
        """Pay once per key: a repeated key returns the first payment."""
        with self._db() as conn:
            self._check_up(conn)
            found = self._find(conn, idempotency_key)
            if found is not None:
                return found
            conn.execute(
                "INSERT INTO payments VALUES (?, ?, ?, ?)",
                (idempotency_key, payee, amount_cents, datetime.now(UTC).isoformat()),
            )
            conn.execute(
                "UPDATE accounts SET balance_cents = balance_cents - ? WHERE name = 'operating'",
                (amount_cents,),
            )
            conn.commit()
            return self._find(conn, idempotency_key) or {}

    def find_payment(self, idempotency_key: str) -> dict[str, Any] | None:
        """The payment made with this key, or None if there is none."""
        with self._db() as conn:
            self._check_up(conn)
            return self._find(conn, idempotency_key)

    @staticmethod
    def _find(conn: sqlite3.Connection, key: str) -> dict[str, Any] | None:
        row = conn.execute("SELECT * FROM payments WHERE idempotency_key = ?", (key,)).fetchone()
        return dict(row) if row is not None else None

    def count_payments(self, idempotency_key: str | None = None) -> int:
        """How many payments there are (with this key, if given); works during an outage."""
        with self._db() as conn:
            if idempotency_key is None:
                return conn.execute("SELECT count(*) FROM payments").fetchone()[0]
            query = "SELECT count(*) FROM payments WHERE idempotency_key = ?"
            return conn.execute(query, (idempotency_key,)).fetchone()[0]

    def set_down(self, down: bool) -> None:
        """Start or end an outage."""
        with self._db() as conn:
            conn.execute("DELETE FROM outage")
            conn.execute("INSERT INTO outage VALUES (?)", (int(down),))
            conn.commit()


if __name__ == "__main__":
    Bank.from_env().set_down(sys.argv[1:] == ["down"])
