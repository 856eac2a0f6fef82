"""The `waypoint` CLI: start, approve and inspect runs; run a worker or the embedded server.

A Temporal client is all most commands need, so anything here can also be done with the
`temporal` CLI or the Web UI. Connection settings come from `temporalio.envconfig`
(`TEMPORAL_ADDRESS`, `TEMPORAL_NAMESPACE`, `TEMPORAL_API_KEY`, TLS, TOML profiles); the default
is the embedded dev server on 127.0.0.1:7233. One module per concern: `runs` (start and read),
`verbs` (every verb of `waypoint.protocol.verbs.VERBS`: approve, reject, answer, resolve,
steer, policy, resume, pause, cancel, fork, ...), `operator` (terminate, decision-key, gc),
`harness` (killtest, torture),
`server` (server, codec-server, worker, setup, connection), `deploy` (which worker build new
runs go to) and `demo`. The global `--profile NAME` and `--config-file FILE` pick the connection
profile.
"""

from __future__ import annotations

import os
import sys

from waypoint._cli import (  # noqa: F401 - registers commands
    console,
    demo,
    deploy,
    harness,
    operator,
    runs,
    server,
    verbs,
)
from waypoint._cli.app import app

__all__ = ["app", "main"]


def main() -> None:
    """Console entry point; exits with os._exit so no SDK teardown can change the exit code."""
    try:
        app()
        code = 0
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
    except KeyboardInterrupt:
        code = 130
    sys.stdout.flush()
    sys.stderr.flush()
    # temporalio 1.35 can abort at interpreter teardown after all work is done.
    os._exit(code)
