"""The `waypoint` CLI end to end, as subprocesses against the session's dev server."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import conftest
from tests.agents import Payments
from tests.cli import BIN, ROOT, first_line, installed, spawn, started_id, stop, wait_for, waypoint
from waypoint._operations.processes import free_port

cli_env = conftest.cli_env
"""conftest's fixture, for the modules that still import it from here."""


@pytest.fixture
def worker(cli_env: dict[str, str], tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    log = (tmp_path / "worker.log").open("w")
    proc = subprocess.Popen(
        [str(BIN / "waypoint"), "worker", "--app", "tests.cli_app:agents"],
        env=cli_env,
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
        text=True,
    )
    yield proc
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)
    log.close()


def test_start_approve_with_plain_temporal_cli_and_inspect(
    cli_env: dict[str, str], worker: subprocess.Popen[str], tmp_path: Path
) -> None:
    started = waypoint(
        cli_env, "start", "payer", "pay ada 5", "--tool-timeout", "42", "--tool-attempts", "5"
    )
    run = started_id(started)
    shown = wait_for(cli_env, run, "awaiting_approval")
    assert "t2.tool.1.pay" in shown and f"waypoint approve {run} t2.tool.1.pay" in shown
    options = json.loads(waypoint(cli_env, "inspect", run).stdout)["input"]["options"]
    assert (options["tool_timeout"], options["tool_max_attempts"]) in [("PT42S", 5), (42.0, 5)]

    wrong = waypoint(cli_env, "approve", run, "t7.tool.1.pay")
    assert wrong.returncode == 1
    assert "is not awaiting approval (pending: t2.tool.1.pay)" in wrong.stderr
    assert "Traceback" not in wrong.stderr

    pending = json.loads(waypoint(cli_env, "status", run, "--json").stdout)["pending_approvals"]
    digest = pending[0]["arguments_hash"]  # approve what was reviewed: the hash is required
    signalled = subprocess.run(
        [
            str(BIN / "temporal"),
            "workflow",
            "signal",
            "--address",
            cli_env["TEMPORAL_ADDRESS"],
            "--workflow-id",
            run,
            "--name",
            "approve",
            "--input",
            json.dumps(
                {"step_id": "t2.tool.1.pay", "reviewer": "temporal-cli", "arguments_hash": digest}
            ),
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert signalled.returncode == 0, signalled.stderr

    result = waypoint(cli_env, "result", run)
    assert result.returncode == 0, result.stderr
    assert "Paid ada 5." in result.stdout
    assert Payments(tmp_path / "payments.db").count() == 1

    table = waypoint(cli_env, "ledger", run)
    assert table.returncode == 0, table.stderr
    for step in ("t0.spec", "t1.tool.1.weather", "t2.tool.1.pay", "t3.model"):
        assert step in table.stdout
    steps = json.loads(waypoint(cli_env, "ledger", run, "--json").stdout)
    pay = next(r for r in steps if r["step_id"] == "t2.tool.1.pay")
    assert pay["decided_by"] == "temporal-cli" and pay["decided_at"]  # a raw signal: no identity
    listed = waypoint(cli_env, "list")
    assert listed.returncode == 0 and run in listed.stdout


def test_reject_and_cancel(
    cli_env: dict[str, str], worker: subprocess.Popen[str], tmp_path: Path
) -> None:
    rejected = started_id(waypoint(cli_env, "start", "payer", "pay ada 5"))
    wait_for(cli_env, rejected, "awaiting_approval")
    no_reason = waypoint(cli_env, "reject", rejected, "t2.tool.1.pay")
    assert no_reason.returncode == 2
    done = waypoint(cli_env, "reject", rejected, "t2.tool.1.pay", "--reason", "wrong payee")
    assert done.returncode == 0, done.stderr
    wait_for(cli_env, rejected, "done")
    ledger = waypoint(cli_env, "ledger", rejected)
    assert "rejected" in ledger.stdout

    cancelled = started_id(waypoint(cli_env, "start", "payer", "pay ada 5"))
    wait_for(cli_env, cancelled, "awaiting_approval")
    assert waypoint(cli_env, "cancel", cancelled).returncode == 0
    result = waypoint(cli_env, "result", cancelled)
    assert result.returncode == 1
    assert Payments(tmp_path / "payments.db").count() == 0


def wait_ready(tmp_path: Path, worker: subprocess.Popen[str], timeout: float = 60) -> None:
    """Wait for the worker's ready line: it is printed after the signal handlers are installed."""
    deadline = time.monotonic() + timeout
    while "ready" not in (tmp_path / "worker.log").read_text().splitlines():
        assert worker.poll() is None, (tmp_path / "worker.log").read_text()
        assert time.monotonic() < deadline, "worker never said ready"
        time.sleep(0.05)


def test_worker_drains_and_exits_zero_on_sigterm(
    cli_env: dict[str, str], worker: subprocess.Popen[str], tmp_path: Path
) -> None:
    wait_ready(tmp_path, worker)
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=20) == 0


def test_missing_server_gets_a_one_line_hint(cli_env: dict[str, str]) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**cli_env, "TEMPORAL_ADDRESS": f"127.0.0.1:{port}"}
    proc = waypoint(env, "status", "nope")
    assert proc.returncode == 1
    assert proc.stderr.strip().count("\n") == 0
    assert "no Temporal server at" in proc.stderr and "waypoint server" in proc.stderr


def test_unknown_run_is_a_clear_error(cli_env: dict[str, str]) -> None:
    proc = waypoint(cli_env, "status", "no-such-run")
    assert proc.returncode == 1
    assert "no run 'no-such-run'" in proc.stderr
    unclear = waypoint(cli_env, "resolve", "no-such-run", "t1.tool.1.pay")
    assert unclear.returncode == 1
    assert "give exactly one of --result JSON, --text TEXT, --retry or --abort" in unclear.stderr
    missing = waypoint(cli_env, "resolve", "no-such-run", "t1.tool.1.pay", "--retry")
    assert missing.returncode == 1 and "no run 'no-such-run'" in missing.stderr


def test_parked_run_resumes_with_raised_limits_and_watch_follows_it(
    cli_env: dict[str, str], worker: subprocess.Popen[str], tmp_path: Path
) -> None:
    run = started_id(waypoint(cli_env, "start", "payer", "pay ada 5", "--max-turns", "1"))
    shown = wait_for(cli_env, run, "limit_reached")
    assert "max_turns=1 reached" in shown
    resumed = waypoint(cli_env, "resume", run, "--max-turns", "5")
    assert resumed.returncode == 0, resumed.stderr
    wait_for(cli_env, run, "awaiting_approval")
    assert waypoint(cli_env, "approve", run, "t2.tool.1.pay").returncode == 0
    watched = waypoint(cli_env, "watch", run)
    assert watched.returncode == 0, watched.stderr
    assert "t2.tool.1.pay" in watched.stdout and re.search(r"state\s+done", watched.stdout)
    assert Payments(tmp_path / "payments.db").count() == 1


def _ignore_sigint() -> None:
    """What a shell without job control does to a command it starts in the background."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["sigint", "sigterm"])
def test_server_command_starts_refuses_a_second_and_stops_on_a_signal(
    tmp_path: Path, sig: signal.Signals
) -> None:
    port = free_port()  # and the UI's its own: port + 1 may be another test process's
    args = [str(BIN / "waypoint"), "server", "--port", str(port), "--ui-port", str(free_port())]
    args += ["--state-dir", str(tmp_path / "state")]
    # Started with SIGINT ignored, as `waypoint server &` in a script is: it must stop anyway.
    proc = subprocess.Popen(
        args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=_ignore_sigint
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first.startswith(f"temporal  127.0.0.1:{port}"), first
        temporal = int((tmp_path / "state" / "server.pid").read_text().split()[0])
        second = subprocess.run(args, capture_output=True, text=True, timeout=60)
        assert second.returncode == 1
        assert "already running" in second.stderr
        assert "Traceback" not in second.stderr
    finally:
        code = stop(proc, sig)
    assert code == 0
    assert (tmp_path / "state" / "temporal.db").exists()
    with pytest.raises(ProcessLookupError):  # the dev server went with it: no orphan
        os.kill(temporal, 0)


@pytest.mark.slow
def test_killtest_command_proves_the_demo(cli_env: dict[str, str]) -> None:
    proc = installed(cli_env, "killtest", "--kills", "2", "--seed", "3", timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "2 kills, OK" in proc.stdout
    assert "'t4.tool.1.create_vendor': 1" in proc.stdout


def test_killtest_of_a_repository_example_outside_a_clone_is_one_line(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """The demo ships in the wheel; the other examples are in the repository only."""
    env = {k: v for k, v in cli_env.items() if k != "PYTHONPATH"}
    proc = installed(env, "killtest", "--example", "procurement", cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stderr.strip().count("\n") == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert "examples.procurement.killtest is not importable here" in proc.stderr


def test_inspect_correct_fork_and_terminate(
    cli_env: dict[str, str], worker: subprocess.Popen[str], tmp_path: Path
) -> None:
    run = started_id(waypoint(cli_env, "start", "payer", "pay ada 5"))
    wait_for(cli_env, run, "awaiting_approval")
    noted = waypoint(cli_env, "correct", run, "--note", "the payee is Ada Lovelace")
    assert noted.returncode == 0, noted.stderr
    bad = waypoint(cli_env, "correct", run, "--step", "t1.tool.1.weather")
    assert bad.returncode == 1 and "--step and --result go together" in bad.stderr
    state = waypoint(cli_env, "inspect", run)
    assert state.returncode == 0 and "Note from" in state.stdout and '"ledger"' in state.stdout
    assert waypoint(cli_env, "approve", run, "t2.tool.1.pay").returncode == 0
    assert waypoint(cli_env, "result", run).returncode == 0

    fork = waypoint(cli_env, "fork", run, "--after-turn", "2")
    forked = started_id(fork)
    assert forked.startswith(f"{run}-fork2-")
    assert "Paid ada 5." in waypoint(cli_env, "result", forked).stdout
    assert Payments(tmp_path / "payments.db").count() == 1

    parked = started_id(waypoint(cli_env, "start", "payer", "pay ada 5"))
    wait_for(cli_env, parked, "awaiting_approval")
    stopped = waypoint(cli_env, "terminate", parked, "--reason", "wrong vendor")
    assert stopped.returncode == 0, stopped.stderr
    assert waypoint(cli_env, "result", parked).returncode == 1


def test_codec_server_needs_keys_and_a_token_it_never_takes_from_argv(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    env = {k: v for k, v in cli_env.items() if not k.startswith("WAYPOINT_CODEC_TOKEN")}
    no_keys = waypoint({**env, "WAYPOINT_CODEC_TOKEN": "t"}, "codec-server")
    assert no_keys.returncode == 1 and "WAYPOINT_ENCRYPTION_KEYS" in no_keys.stderr
    keyed = {**env, "WAYPOINT_ENCRYPTION_KEYS": "k1:" + "A" * 43 + "="}
    no_token = waypoint(keyed, "codec-server")
    assert no_token.returncode == 1 and "WAYPOINT_CODEC_TOKEN" in no_token.stderr
    assert waypoint(keyed, "codec-server", "--token", "s3cret").returncode == 2
    token_file = tmp_path / "codec-token"
    token_file.write_text("s3cret\n")
    token_file.chmod(0o644)
    shared = waypoint(keyed, "codec-server", "--token-file", str(token_file))
    assert shared.returncode == 1 and "chmod 600" in shared.stderr
    token_file.chmod(0o600)
    port = free_port()
    proc = spawn(keyed, "codec-server", "--token-file", str(token_file), "--port", str(port))
    try:
        assert "codec server on" in first_line(proc)
        assert b"s3cret" not in Path(f"/proc/{proc.pid}/cmdline").read_bytes()
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/decode", data=b'{"payloads": []}', method="POST"
        )
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=5)
        assert refused.value.code == 401
        refused.value.close()
        taken = waypoint(
            keyed, "codec-server", "--token-file", str(token_file), "--port", str(port)
        )
        assert taken.returncode == 1 and "Traceback" not in taken.stderr, taken.stderr
        assert f"cannot listen on 127.0.0.1:{port}" in taken.stderr, taken.stderr
        request.add_header("Authorization", "Bearer s3cret")
        request.add_header("X-Namespace", "default")  # the keys belong to one namespace
        with urllib.request.urlopen(request, timeout=5) as answer:
            assert json.loads(answer.read()) in ({"payloads": []}, {})
    finally:
        code = stop(proc, signal.SIGINT)
    assert code == 0


def test_server_refuses_a_codec_endpoint_that_holds_the_token(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """The dev server's arguments are world-readable in `ps`: the token must not go there."""
    env = {**cli_env, "WAYPOINT_CODEC_TOKEN": "s3cret-token"}
    refused = waypoint(
        env,
        "server",
        "--state-dir",
        str(tmp_path / "state"),
        "--codec-endpoint",
        "http://127.0.0.1:8081/s3cret-token",
    )
    assert refused.returncode == 1 and "codec server settings" in refused.stderr
    assert not (tmp_path / "state").exists()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_server_started_with_stop_signals_blocked_still_stops_on_them(
    cli_env: dict[str, str], sig: int
) -> None:
    """A thread that blocks SIGINT and SIGTERM while it spawns passes the block on to the child.

    (`multiprocessing` does so while it starts a helper process.) A codec server spawned so
    never saw SIGINT and was SIGKILLed after 30 s, as CI saw twice.
    """
    keyed = {
        **cli_env,
        "WAYPOINT_ENCRYPTION_KEYS": "k1:" + "A" * 43 + "=",
        "WAYPOINT_CODEC_TOKEN": "s3cret",
    }
    port = free_port()
    command = [str(BIN / "waypoint"), "codec-server", "--port", str(port)]
    spawned: list[subprocess.Popen[str]] = []

    def spawn_blocked() -> None:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        spawned.append(
            subprocess.Popen(
                command, env=keyed, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
        )

    thread = threading.Thread(target=spawn_blocked)
    thread.start()
    thread.join()
    (proc,) = spawned
    assert proc.stdout is not None and "codec server on" in proc.stdout.readline()
    with pytest.raises(urllib.error.HTTPError) as refused:  # answered: it is serving now
        urllib.request.urlopen(f"http://127.0.0.1:{port}/decode", data=b"{}", timeout=5)
    refused.value.close()
    assert stop(proc, sig) == 0


def test_a_codec_server_on_port_0_says_the_port_it_got(cli_env: dict[str, str]) -> None:
    keyed = {
        **cli_env,
        "WAYPOINT_ENCRYPTION_KEYS": "k1:" + "A" * 43 + "=",
        "WAYPOINT_CODEC_TOKEN": "s3cret",
    }
    proc = spawn(keyed, "codec-server", "--port", "0")
    try:
        said = re.search(r"codec server on http://127\.0\.0\.1:(\d+) ", first_line(proc))
        assert said and int(said.group(1)) > 0, said
        with pytest.raises(urllib.error.HTTPError) as refused:  # it listens where it says
            urllib.request.urlopen(
                f"http://127.0.0.1:{said.group(1)}/decode", data=b"{}", timeout=5
            )
        assert refused.value.code == 401
        refused.value.close()
    finally:
        assert stop(proc, signal.SIGINT) == 0
