"""The console's audit log: a JSON line for every sign-in, sign-out, verb sent to a run and 403.

Each line says when, what, who (their name and how they signed in), from where (the client's
address) and which run, and how it ended; never a password, token, cookie or CSRF value, and
no free text a person typed (a reason, a steer, an answer). It is on by default: lines go to
standard error, or are appended to the file `WAYPOINT_CONSOLE_AUDIT` names. JSON escapes
every newline, so one request is one line whatever it sent.
"""

from __future__ import annotations

import contextlib
import json
import sys
import threading
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from fastapi import Request
from temporalio.service import RPCError

from waypoint._console.people import Principal
from waypoint._console.problems import Problem, status_of
from waypoint.errors import WaypointError


class Audit:
    """Writes audit lines to `stream` (standard error by default) or appends them to `path`."""

    def __init__(self, stream: TextIO | None = None, path: Path | None = None) -> None:
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.touch(mode=0o600)
        self._stream = stream
        self.path = path
        """Opened for each line: a rotated file is followed, and nothing is left open."""
        self._lock = threading.Lock()

    def record(
        self,
        event: str,
        request: Request | None,
        who: Principal | str | None = None,
        run: str = "",
        **fields: Any,
    ) -> None:
        """One line: `event`, by `who`, from the request's address, about `run`."""
        name = who.name if isinstance(who, Principal) else who
        line = {
            "time": datetime.now(UTC).isoformat(timespec="milliseconds"),
            "event": event,
            "who": name,
            "via": who.via if isinstance(who, Principal) else None,
            "from": address(request) if request is not None else None,
            **({"run": run} if run else {}),
            **fields,
        }
        text = json.dumps(line, default=str) + "\n"
        with self._lock:
            if self.path is not None:
                with self.path.open("a", encoding="utf-8") as file:
                    file.write(text)
                return
            stream = self._stream or sys.stderr  # read late: pytest and daemons swap it
            stream.write(text)
            stream.flush()

    @contextlib.asynccontextmanager
    async def verb(
        self, request: Request, who: Principal, event: str, run: str = "", **fields: Any
    ) -> AsyncIterator[dict[str, Any]]:
        """Record `event` once the body of the `async with` ends: done, or refused and why.

        The body may add fields to the dict it is given (`run`: the id a start made).
        """
        more: dict[str, Any] = {}
        try:
            yield more
        except Exception as err:
            more.update(outcome="refused", status=refusal_status(err))
            self.record(event, request, who, more.pop("run", run), **fields, **more)
            raise
        self.record(event, request, who, more.pop("run", run), **fields, **more, outcome="done")


def address(request: Request) -> str:
    """The client's address as uvicorn saw it (behind a proxy: `FORWARDED_ALLOW_IPS`)."""
    return request.client.host if request.client else "?"


def refusal_status(err: Exception) -> int:
    """The status the console answers `err` with, as well as the audit line can tell."""
    if isinstance(err, Problem):
        return err.status
    if isinstance(err, WaypointError):
        return status_of(err)
    if isinstance(err, RPCError):
        return 503
    return 500
