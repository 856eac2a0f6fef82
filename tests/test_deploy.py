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
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from temporalio.testing import WorkflowEnvironment

from tests.cli import first_line, spawn, stop
from waypoint.protocol import search_attributes as sa

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


def test_compose_runs_temporal_on_postgres_the_ui_an_object_store_and_workers() -> None:
    text = COMPOSE.read_text()
    for service in ("postgresql:", "temporal:", "temporal-ui:", "objectstore:", "worker:"):
        assert f"\n  {service}" in text, service
    assert "DB: postgres12" in text
    for key in sa.ALL:
        assert key.name in text, f"compose does not register {key.name}"


def test_worker_image_command_runs_outside_docker(env: WorkflowEnvironment, tmp_path: Path) -> None:
    cmd = json.loads(re.search(r"^CMD (\[.*\])$", (ROOT / "Dockerfile").read_text(), re.M)[1])
    assert cmd == ["waypoint", "worker"]
    environ = {
        **os.environ,
        "TEMPORAL_ADDRESS": env.client.service_client.config.target_host,
        "TEMPORAL_NAMESPACE": "default",
        "WAYPOINT_PAYLOAD_STORE": str(tmp_path / "payloads"),
        "WAYPOINT_TRANSCRIPT_STORE": str(tmp_path / "transcripts"),
    }
    proc = spawn(environ, *cmd[1:], cwd=tmp_path, merged=True)
    try:
        line = first_line(proc)
        assert "worker on queue 'waypoint': vendor_onboarding" in line, line
        time.sleep(0.5)
    finally:
        code = stop(proc, signal.SIGTERM)
    assert code == 0


@pytest.mark.parametrize("variable", ["TEMPORAL_ADDRESS", "ANTHROPIC_API_KEY"])
def test_compose_passes_connection_and_secrets_by_environment(variable: str) -> None:
    assert variable in COMPOSE.read_text()


def services() -> dict:
    from ruamel.yaml import YAML

    return YAML(typ="safe").load(COMPOSE.read_text())["services"]


def defaults(value: str) -> str:
    """`value` as compose reads it with no variable set: every `${NAME:-default}` its default."""
    return re.sub(r"\$\{(\w+):-([^}]*)\}", r"\2", value)


def test_compose_publishes_ports_on_loopback_by_default() -> None:
    published = [port for service in services().values() for port in service.get("ports", [])]
    assert len(published) == 4  # Temporal, the Web UI, the object store's S3 API, the console
    for port in published:
        assert defaults(port).startswith("127.0.0.1:"), port


def test_compose_runs_three_workers_that_share_only_temporal_and_the_object_store() -> None:
    worker = services()["worker"]
    assert worker["deploy"]["replicas"] == 3
    assert "ports" not in worker, "replicas share no port"
    # and no disk but this host's attempt journal, which each proves the others dead by
    assert worker["volumes"] == [f"worker-attempts:{image_journal()}"]
    env = dict(defaults(item).split("=", 1) for item in worker["environment"] if "=" in item)
    assert env["WAYPOINT_STORE"] == "s3://waypoint/runs"
    assert not {"WAYPOINT_PAYLOAD_STORE", "WAYPOINT_TRANSCRIPT_STORE"} & set(env)
    host, _, port = env["AWS_ENDPOINT_URL"].removeprefix("http://").partition(":")
    assert host == "objectstore"
    assert worker["depends_on"]["objectstore"]["condition"] == "service_healthy"
    store = services()["objectstore"]
    assert any(defaults(p).endswith(f":{port}") for p in store["ports"])
    assert "healthcheck" in store and "/data/waypoint" in " ".join(store["entrypoint"])
    creds = {k: defaults(v) for k, v in store["environment"].items()}
    assert env["AWS_ACCESS_KEY_ID"] == creds["MINIO_ROOT_USER"]
    assert env["AWS_SECRET_ACCESS_KEY"] == creds["MINIO_ROOT_PASSWORD"]


def image_journal() -> str:
    """Where the worker image keeps its attempt journal."""
    dockerfile = (ROOT / "Dockerfile").read_text()
    return re.search(r"^ENV WAYPOINT_ATTEMPT_JOURNAL=(\S+)$", dockerfile, re.M)[1]


def test_the_image_and_compose_give_the_worker_a_writable_journal_volume() -> None:
    """WORKDIR /app is root's, and the worker runs as `waypoint`: the journal's default under
    it could not be made, and each restart would have started with an empty one."""
    dockerfile = (ROOT / "Dockerfile").read_text()
    journal = image_journal()
    made = re.search(r"mkdir -p ([^&]*)&& chown waypoint ([^\n]*)", dockerfile)
    assert made and journal in made[1].split() and journal in made[2].split()
    assert dockerfile.index("ENV WAYPOINT_ATTEMPT_JOURNAL") < dockerfile.index("USER waypoint")
    from ruamel.yaml import YAML

    assert "worker-attempts" in YAML(typ="safe").load(COMPOSE.read_text())["volumes"]


def test_the_docs_pod_spec_keeps_the_journal_across_restarts_and_outlasts_the_drain() -> None:
    from ruamel.yaml import YAML

    page = (ROOT / "docs" / "clusters.md").read_text()
    (block,) = re.findall(r"```yaml\n(.*?)```", page, re.S)
    pod = YAML(typ="safe").load(block)["spec"]["template"]["spec"]
    (worker,) = pod["containers"]
    env = {e["name"]: e["value"] for e in worker["env"]}
    assert pod["restartPolicy"] == "Always"
    assert pod["terminationGracePeriodSeconds"] > int(env["WAYPOINT_DRAIN_SECONDS"])
    assert env["WAYPOINT_ATTEMPT_JOURNAL"] == image_journal()
    (mount,) = worker["volumeMounts"]
    (volume,) = pod["volumes"]
    assert mount["mountPath"] == image_journal() and volume["name"] == mount["name"]
    assert "emptyDir" in volume


def locked_versions(text: str) -> dict[str, str]:
    """name -> version of every `name==version` entry of a lock file, names normalised."""
    found = re.findall(r"^([A-Za-z0-9][\w.-]*)==([^\s;\\]+)", text, re.M)
    return {canonicalize_name(name): version for name, version in found}


def test_lock_files_pin_every_declared_dependency_with_hashes() -> None:
    """A dependency added to pyproject.toml, or a range moved, without `bash scripts/lock.sh`
    fails here: every declared range holds the version its lock pins."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    runtime = [Requirement(r) for r in project["dependencies"]]
    extras = project["optional-dependencies"]
    # The worker image installs requirements.lock, and compose's workers use the S3 store.
    s3 = [Requirement(r) for r in extras["s3"]]
    dev = [Requirement(r) for r in extras["dev"]]
    for lock, wanted in [
        ("requirements.lock", runtime + s3),
        ("requirements-dev.lock", runtime + dev),
    ]:
        text = (ROOT / lock).read_text()
        locked = locked_versions(text)
        for req in wanted:
            version = locked.get(canonicalize_name(req.name))
            assert version is not None, f"{lock} lacks {req.name}: run bash scripts/lock.sh"
            assert req.specifier.contains(version), f"{lock} pins {req.name}=={version}, not {req}"
        entries = re.split(r"\n(?=[A-Za-z0-9])", text.split("\n", 2)[2].strip())
        assert all("--hash=sha256:" in entry for entry in entries if "==" in entry)
        assert "://" not in text and not re.search(r"^-", text, re.M), "no index or host"


@pytest.mark.parametrize(
    ("path", "lock"),
    [
        ("Dockerfile", "requirements.lock"),
        ("scripts/demo.sh", "requirements.lock"),
        ("scripts/test.sh", "requirements-dev.lock"),
    ],
)
def test_installs_use_the_lock_with_hashes(path: str, lock: str) -> None:
    text = (ROOT / path).read_text()
    assert f"--require-hashes -r {lock}" in text
    assert "--no-deps" in text
