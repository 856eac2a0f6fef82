"""A child process's stderr, read as the run's data: logged, and withheld under encryption.

A stdio MCP server writes its tracebacks, with the arguments it was called with, to stderr;
passed straight through, they reached the worker's log unredacted with encryption on. Here the
child writes into a pipe, a thread reads it line by line and logs each line under the
`waypoint.child` logger at INFO, or, once `redact_logs` is installed, only that it wrote.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Iterator
from typing import TextIO

from waypoint._security import redaction

log = logging.getLogger("waypoint.child")

MAX_LINE = 2000
"""Characters of one line logged; a longer one is cut and says so."""


@contextlib.contextmanager
def child_stderr(name: str) -> Iterator[TextIO]:
    """A file to give a child as its stderr; its lines are logged as `name`'s."""
    read_fd, write_fd = os.pipe()
    reader = threading.Thread(
        target=_relay, args=(read_fd, name), name=f"stderr of {name}", daemon=True
    )
    reader.start()
    writer = os.fdopen(write_fd, "w")
    try:
        yield writer
    finally:
        writer.close()  # the child keeps its own copy: the relay ends when the child exits


def _relay(read_fd: int, name: str) -> None:
    with os.fdopen(read_fd, "r", errors="replace") as lines:
        for line in lines:
            text = line.rstrip("\n")
            if not text:
                continue
            if redaction.redacting():
                log.info(
                    "%s wrote %d characters to stderr [%s]", name, len(text), redaction.WITHHELD
                )
            elif len(text) > MAX_LINE:
                log.info(
                    "%s: %s ... [%d characters more]", name, text[:MAX_LINE], len(text) - MAX_LINE
                )
            else:
                log.info("%s: %s", name, text)
