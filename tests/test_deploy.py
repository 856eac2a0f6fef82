"""Beyond one machine: the compose file is valid and the worker image's command really runs."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from temporalio.testing import WorkflowEnvironment

from waypoint import search_attributes as sa

BIN = Path(sys.executable).parent
ROOT = Path(__file__).parent.parent
COMPOSE = ROOT / "docker-compose.yml"


def validate(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "check-jsonschema"), "--builtin-schema", "vendor.compose-spec", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_compose_file_matches_the_compose_specification(tmp_path: Path) -> None:
    checked = validate(COMPOSE)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    broken = tmp_path / "docker-compose.yml"
    broken.write_text(COMPOSE.read_text().replace("services:", "servicez:", 1))
    assert validate(broken).returncode != 0


def test_compose_runs_temporal_on_postgres_the_ui_and_a_worker() -> None:
    text = COMPOSE.read_text()
    for service in ("postgresql:", "temporal:", "temporal-ui:", "worker:"):
        assert f"\n  {service}" in text, service
    assert "DB: postgres12" in text
    for key in sa.ALL:
        assert key.name in text, f"compose does not register {key.name}"


def test_worker_image_command_runs_outside_docker(env: WorkflowEnvironment, tmp_path: Path) -> None:
    cmd = json.loads(re.search(r"^CMD (\[.*\])$", (ROOT / "Dockerfile").read_text(), re.M)[1])
    assert cmd == ["waypoint", "worker"]
    proc = subprocess.Popen(
        [str(BIN / cmd[0]), *cmd[1:]],
        env={
            **os.environ,
            "TEMPORAL_ADDRESS": env.client.service_client.config.target_host,
            "TEMPORAL_NAMESPACE": "default",
            "WAYPOINT_PAYLOAD_STORE": str(tmp_path / "payloads"),
            "WAYPOINT_TRANSCRIPT_STORE": str(tmp_path / "transcripts"),
        },
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert "worker on queue 'waypoint': vendor_onboarding" in line, line
        time.sleep(0.5)
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=30)
        proc.stdout.close()  # type: ignore[union-attr]
    assert code == 0


@pytest.mark.parametrize("variable", ["TEMPORAL_ADDRESS", "ANTHROPIC_API_KEY"])
def test_compose_passes_connection_and_secrets_by_environment(variable: str) -> None:
    assert variable in COMPOSE.read_text()
