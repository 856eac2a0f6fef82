"""The floor: the same loop in plain Python, one fsync'd SQLite row per step."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence
from pathlib import Path


def _noop(payload: str, reply_size: int) -> str:
    return "y" * reply_size


def sqlite_floor(path: Path, sizes: Sequence[tuple[int, int]]) -> float:
    """Seconds to run the steps, each committing its result as one row (WAL, synchronous=FULL)."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("CREATE TABLE IF NOT EXISTS steps (run TEXT, step INTEGER, result TEXT)")
        run = f"run-{time.time_ns()}"
        started = time.perf_counter()
        for step, (size_in, size_out) in enumerate(sizes):
            result = _noop("x" * size_in, size_out)
            conn.execute("INSERT INTO steps VALUES (?, ?, ?)", (run, step, result))
        return time.perf_counter() - started
    finally:
        conn.close()
