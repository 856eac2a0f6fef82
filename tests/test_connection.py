"""One envconfig profile gives the worker, the CLI and the codec server the same connection."""

from __future__ import annotations

import json
import os
import signal
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from temporalio.service import TLSConfig
from temporalio.testing import WorkflowEnvironment

from tests.cli import ROOT, first_line, spawn, stop, waypoint
from tests.conftest import running_worker
from waypoint._agent import Agent
from waypoint._operations import connection
from waypoint._operations.codec_server import DEV_UI_ORIGINS
from waypoint._operations.dev_server import free_port
from waypoint.client import runs
from waypoint.errors import ProfileError
from waypoint.settings import connect, connect_config
from waypoint.testing import reply, text

API_KEY = "wp-test-api-key-never-printed"
CONNECTION_VARS = ("TEMPORAL_ADDRESS", "TEMPORAL_NAMESPACE", "TEMPORAL_API_KEY", "TEMPORAL_PROFILE")


def profiles(tmp_path: Path, dev_address: str = "127.0.0.1:1") -> Path:
    """A temporal.toml with a Cloud (API key), a self-hosted (mTLS) and a local profile."""
    for name in ("ca.pem", "client.pem", "client.key"):
        (tmp_path / name).write_text(f"-----{name}-----\n")
    path = tmp_path / "temporal.toml"
    path.write_text(
        f"""
[profile.cloud]
address = "agents.a1b2c.tmprl.cloud:7233"
namespace = "agents.a1b2c"
api_key = "{API_KEY}"

[profile.selfhosted]
address = "temporal.internal:7233"
namespace = "agents"
[profile.selfhosted.tls]
server_name = "temporal.internal"
server_ca_cert_path = "{tmp_path / "ca.pem"}"
client_cert_path = "{tmp_path / "client.pem"}"
client_key_path = "{tmp_path / "client.key"}"

[profile.dev]
address = "{dev_address}"
namespace = "default"
"""
    )
    return path


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """This process's environment without connection variables, so only the profile speaks."""
    for name in (*CONNECTION_VARS, "TEMPORAL_CONFIG_FILE"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_worker_connects_with_the_cloud_profiles_api_key_over_tls(
    clean_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    clean_env.setenv("TEMPORAL_CONFIG_FILE", str(profiles(tmp_path)))
    clean_env.setenv("TEMPORAL_PROFILE", "cloud")
    assert connect_config() == {
        "target_host": "agents.a1b2c.tmprl.cloud:7233",
        "namespace": "agents.a1b2c",
        "api_key": API_KEY,
        "tls": True,
    }


def test_worker_connects_with_the_self_hosted_profiles_client_certificates(
    clean_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    clean_env.setenv("TEMPORAL_CONFIG_FILE", str(profiles(tmp_path)))
    clean_env.setenv("TEMPORAL_PROFILE", "selfhosted")
    config = connect_config()
    assert config["target_host"] == "temporal.internal:7233"
    assert config["namespace"] == "agents"
    assert "api_key" not in config
    tls = config["tls"]
    assert isinstance(tls, TLSConfig)
    assert tls.domain == "temporal.internal"
    assert tls.server_root_ca_cert == (tmp_path / "ca.pem").read_bytes()
    assert tls.client_cert == (tmp_path / "client.pem").read_bytes()
    assert tls.client_private_key == (tmp_path / "client.key").read_bytes()


def test_environment_variables_override_the_profile_field_by_field(
    clean_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    clean_env.setenv("TEMPORAL_CONFIG_FILE", str(profiles(tmp_path)))
    clean_env.setenv("TEMPORAL_PROFILE", "cloud")
    clean_env.setenv("TEMPORAL_NAMESPACE", "staging.a1b2c")
    config = connect_config()
    assert config["namespace"] == "staging.a1b2c"
    assert config["target_host"] == "agents.a1b2c.tmprl.cloud:7233"


def test_no_profile_and_no_variables_mean_the_embedded_dev_server(
    clean_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    clean_env.setenv("HOME", str(tmp_path))  # no ~/.config/temporalio/temporal.toml
    assert connect_config() == {"target_host": "127.0.0.1:7233", "namespace": "default"}


def test_a_missing_profile_or_file_is_one_clear_error(
    clean_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    clean_env.setenv("TEMPORAL_CONFIG_FILE", str(profiles(tmp_path)))
    clean_env.setenv("TEMPORAL_PROFILE", "prod")
    with pytest.raises(ProfileError, match="'prod'.*not found"):
        connect_config()
    clean_env.setenv("TEMPORAL_CONFIG_FILE", str(tmp_path / "nowhere.toml"))
    with pytest.raises(ProfileError, match="nowhere.toml: no such file"):
        connect_config()


async def test_worker_and_client_reach_the_server_through_a_profile(
    env: WorkflowEnvironment, clean_env: pytest.MonkeyPatch, tmp_path: Path, task_queue: str
) -> None:
    address = env.client.service_client.config.target_host
    clean_env.setenv("TEMPORAL_CONFIG_FILE", str(profiles(tmp_path, address)))
    clean_env.setenv("TEMPORAL_PROFILE", "dev")
    clean_env.setenv("WAYPOINT_PAYLOAD_STORE", str(tmp_path / "payloads"))
    client = await connect()
    assert client.service_client.config.target_host == address
    assert client.namespace == "default"
    agent = Agent("profiled", "claude-sonnet-4-6", "You answer.", [], script=[reply(text("hi"))])
    async with running_worker(client, [agent], task_queue):
        handle = await runs.start_run(client, "profiled", "say hi", task_queue=task_queue)
        assert (await handle.result()).output == "hi"


def bare_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in CONNECTION_VARS}
    env.pop("TEMPORAL_CONFIG_FILE", None)
    return {**env, "HOME": str(tmp_path), "PYTHONPATH": str(ROOT)}


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (
            ["--profile", "cloud"],
            {
                "profile": "cloud",
                "address": "agents.a1b2c.tmprl.cloud:7233",
                "namespace": "agents.a1b2c",
                "tls": True,
                "api_key": "set",
                "client_cert": None,
            },
        ),
        (
            ["--profile", "selfhosted"],
            {
                "profile": "selfhosted",
                "address": "temporal.internal:7233",
                "namespace": "agents",
                "tls": True,
                "api_key": None,
                "server_name": "temporal.internal",
            },
        ),
    ],
)
def test_cli_shows_the_profiles_connection_without_the_api_key(
    tmp_path: Path, flags: list[str], expected: dict[str, object]
) -> None:
    toml = profiles(tmp_path)
    shown = waypoint(bare_env(tmp_path), "--config-file", str(toml), *flags, "connection", "--json")
    assert shown.returncode == 0, shown.stderr
    assert API_KEY not in shown.stdout
    got = json.loads(shown.stdout)
    assert got["config_file"] == str(toml)
    assert {k: got[k] for k in expected} == expected
    if flags[1] == "selfhosted":
        assert got["server_ca_cert"] == str(tmp_path / "ca.pem")
        assert got["client_cert"] == str(tmp_path / "client.pem")
        assert got["client_key"] == str(tmp_path / "client.key")


def test_cli_commands_use_the_profile_from_the_environment_too(
    env: WorkflowEnvironment, tmp_path: Path
) -> None:
    address = env.client.service_client.config.target_host
    toml = profiles(tmp_path, address)
    environ = {**bare_env(tmp_path), "TEMPORAL_CONFIG_FILE": str(toml), "TEMPORAL_PROFILE": "dev"}
    listed = waypoint(environ, "list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert isinstance(json.loads(listed.stdout), list)
    missing = waypoint({**environ, "TEMPORAL_PROFILE": "prod"}, "list")
    assert missing.returncode == 1
    assert "'prod'" in missing.stderr and "not found" in missing.stderr


def test_codec_server_serves_the_profiles_namespace_and_clouds_ui(
    clean_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    clean_env.setenv("TEMPORAL_CONFIG_FILE", str(profiles(tmp_path)))
    clean_env.setenv("TEMPORAL_PROFILE", "cloud")
    cloud = connection.load()
    assert cloud.namespace == "agents.a1b2c"
    assert connection.codec_origins(cloud, DEV_UI_ORIGINS)[0] == "https://cloud.temporal.io"
    clean_env.setenv("TEMPORAL_PROFILE", "selfhosted")
    assert connection.codec_origins(connection.load(), DEV_UI_ORIGINS) == DEV_UI_ORIGINS


def test_codec_server_command_refuses_other_namespaces(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("s3cret\n")
    token_file.chmod(0o600)
    environ = {
        **bare_env(tmp_path),
        "TEMPORAL_CONFIG_FILE": str(profiles(tmp_path)),
        "WAYPOINT_ENCRYPTION_KEYS": "k1:" + "A" * 43 + "=",
    }
    port = free_port()
    command = ["--profile", "cloud", "codec-server", "--token-file", str(token_file)]
    proc = spawn(environ, *command, "--port", str(port))
    try:
        line = first_line(proc)
        assert "namespace 'agents.a1b2c'" in line and "https://cloud.temporal.io" in line, line

        def post(namespace: str) -> int:
            request = urllib.request.Request(
                f"http://127.0.0.1:{port}/decode",
                data=b'{"payloads": []}',
                method="POST",
                headers={"Authorization": "Bearer s3cret", "X-Namespace": namespace},
            )
            try:
                with urllib.request.urlopen(request, timeout=5) as answer:
                    return answer.status
            except urllib.error.HTTPError as refused:
                refused.close()
                return refused.code

        assert post("agents.a1b2c") == 200
        assert post("someone-else.a1b2c") == 403
    finally:
        code = stop(proc, signal.SIGINT)
    assert code == 0
