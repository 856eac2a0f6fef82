"""`waypoint console`, `console-user` and `console-token` as a user runs them, and the compose
service's command: people added from the CLI sign in to a console served by it, which stops
cleanly (exit 0) on SIGTERM."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import tomllib
from pathlib import Path

import httpx
from temporalio.testing import WorkflowEnvironment

from tests.cli import ROOT, first_line, installed, spawn, stop
from waypoint._operations.dev_server import free_port


def waypoint(
    *args: str, cwd: Path, stdin: str = "", env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return installed({**os.environ, **(env or {})}, *args, cwd=cwd, stdin=stdin)


def test_people_are_added_with_hashes_only_and_bad_roles_refused(tmp_path: Path) -> None:
    added = waypoint(
        "console-user", "ann", "--role", "payer=approver", "--password-stdin",
        cwd=tmp_path, stdin="a long password\n",
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    token = waypoint("console-token", "billing", "--role", "*=operator", cwd=tmp_path)
    assert token.returncode == 0 and token.stdout.startswith("wpt_")
    users = tmp_path / ".waypoint" / "console-users.toml"
    text = users.read_text()
    assert "a long password" not in text and token.stdout.strip() not in text
    assert oct(users.stat().st_mode & 0o777) == "0o600"
    data = tomllib.loads(text)
    assert data["users"]["ann"]["roles"] == {"payer": "approver"}
    assert data["tokens"]["billing"]["hash"].startswith("sha256$")
    bad = waypoint("console-user", "bob", "--role", "payer=admin", "--password-stdin",
                   cwd=tmp_path, stdin="a long password\n")  # fmt: skip
    assert bad.returncode == 1 and "one of viewer, approver, operator" in bad.stderr
    short = waypoint("console-user", "bob", "--role", "*=viewer", "--password-stdin",
                     cwd=tmp_path, stdin="short\n")  # fmt: skip
    assert short.returncode == 1 and "at least 8" in short.stderr


def test_the_compose_command_serves_the_console_and_stops_with_exit_0(
    env: WorkflowEnvironment, tmp_path: Path
) -> None:
    compose = (ROOT / "docker-compose.yml").read_text()
    command = re.search(r'command: \["waypoint", "console", (.*)\]', compose)
    assert command, "compose has a console service"
    added = waypoint("console-user", "ann", "--role", "*=viewer", "--password-stdin",
                     cwd=tmp_path, stdin="a long password\n")  # fmt: skip
    assert added.returncode == 0, added.stderr
    port = free_port()
    connection = {
        "TEMPORAL_ADDRESS": env.client.service_client.config.target_host,
        "TEMPORAL_NAMESPACE": "default",
    }
    command = ["console", "--host", "127.0.0.1", "--port", str(port)]
    proc = spawn({**os.environ, **connection}, *command, cwd=tmp_path, merged=True)
    try:
        line = first_line(proc)
        assert f"console on http://127.0.0.1:{port}" in line, line
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as http:
            assert http.get("/api/runs").status_code == 401
            form = http.get("/signin").text
            token = form.split('name="form_token" value="')[1].split('"')[0]
            signed = http.post(
                "/signin",
                data={"user": "ann", "password": "a long password", "form_token": token},
            )
            assert signed.status_code == 303
            assert http.get("/api/me").json()["roles"] == {"*": "viewer"}
    finally:
        code = stop(proc, signal.SIGTERM)
    assert code == 0
    with socket.socket() as taken:  # a port in use: one line, exit 1
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = str(taken.getsockname()[1])
        bad = waypoint("console", "--port", busy, cwd=tmp_path, env=connection)
    assert bad.returncode == 1 and "cannot listen" in bad.stderr, bad.stderr
