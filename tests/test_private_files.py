"""What Waypoint writes beside a run's data is its owner's alone, whatever the umask (issue 34.4).

Under umask 022 the dev server's state folder was 0755 and its database (every history),
log and pid 0644, and so were the server record, the trace file and the step log.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from waypoint._operations import ui
from waypoint._operations.dev_server import (
    DB_FILENAME,
    LOG_FILENAME,
    PID_FILENAME,
    start_dev_server,
)
from waypoint._operations.processes import free_port
from waypoint._operations.tracing import _file_exporter  # pyright: ignore[reportPrivateUsage]
from waypoint._security.private import append_private


@pytest.fixture
def umask_022() -> Iterator[None]:
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_dev_server_keeps_its_state_and_record_private(
    tmp_path: Path, umask_022: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WAYPOINT_HOME", str(tmp_path / "home"))
    state = tmp_path / "state"
    state.mkdir(mode=0o755)  # an earlier version's folder is tightened too
    server = start_dev_server(state, port=free_port(), ui_port=free_port(), timeout=60)
    try:
        assert mode(state) == 0o700
        for name in (DB_FILENAME, LOG_FILENAME, PID_FILENAME):
            assert mode(state / name) == 0o600, name
        assert mode(ui.record_path()) == 0o600
        assert mode(ui.record_path().parent) == 0o700
    finally:
        server.stop()


def test_the_trace_file_and_the_step_log_are_private(tmp_path: Path, umask_022: None) -> None:
    old = tmp_path / "steps.log"
    old.write_text("")
    old.chmod(0o644)  # written by an earlier version
    append_private(old, "x\n")  # each StepLog.write is one such append
    assert mode(old) == 0o600
    fresh = tmp_path / "fresh.log"
    append_private(fresh, "x\n")
    assert mode(fresh) == 0o600
    assert old.read_text() == fresh.read_text() == "x\n"
    traces = tmp_path / "traces" / "spans.jsonl"
    exporter = _file_exporter(traces)
    assert exporter.export([]).name == "SUCCESS"
    assert mode(traces.parent) == 0o700
    assert mode(traces) == 0o600
