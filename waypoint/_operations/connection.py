"""Where Temporal is: one envconfig profile for the worker, the CLI and the codec server.

A profile in a TOML file (``TEMPORAL_CONFIG_FILE``, else ``~/.config/temporalio/temporal.toml``),
chosen by ``TEMPORAL_PROFILE`` or ``waypoint --profile NAME``, gives the address, namespace, TLS
client certificates or API key; ``TEMPORAL_ADDRESS``, ``TEMPORAL_NAMESPACE``, ``TEMPORAL_API_KEY``
and ``TEMPORAL_TLS_*`` override it field by field. The same profile the `temporal` CLI reads, so
one file serves both. With nothing set, the embedded dev server on 127.0.0.1:7233.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from temporalio.envconfig import ClientConfigProfile, DataSource

from waypoint.errors import ProfileError

DEFAULT_ADDRESS = "127.0.0.1:7233"
DEFAULT_NAMESPACE = "default"
DEFAULT_PROFILE = "default"
CLOUD_UI_ORIGIN = "https://cloud.temporal.io"
CLOUD_HOST_SUFFIXES = (".tmprl.cloud", ".api.temporal.io")


@dataclass(frozen=True)
class Connection:
    """A resolved profile: what the worker, the CLI and the codec server connect to."""

    profile: str
    config_file: str | None
    address: str
    namespace: str
    api_key: str | None
    tls: bool
    server_name: str | None = None
    server_ca_cert: str | None = None
    client_cert: str | None = None
    client_key: str | None = None
    raw: ClientConfigProfile | None = None

    @property
    def cloud(self) -> bool:
        """Whether the address is Temporal Cloud's (its UI then calls the codec server)."""
        host = self.address.rsplit(":", 1)[0]
        return host.endswith(CLOUD_HOST_SUFFIXES)

    def connect_config(self) -> dict[str, Any]:
        """Keyword arguments for `Client.connect`, certificates read from their files."""
        config: dict[str, Any] = {}
        if self.raw is not None:
            config.update(self.raw.to_client_connect_config())
        config["target_host"] = self.address
        config["namespace"] = self.namespace
        return config

    def summary(self) -> dict[str, Any]:
        """What `waypoint connection` shows: everything but the API key, which is only said set."""
        hidden = ("api_key", "raw")
        shown = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in hidden}
        return {**shown, "api_key": "set" if self.api_key else None}


def _source(source: DataSource | None) -> str | None:
    """A certificate's file path, or `inline` when the profile holds its data."""
    if source is None:
        return None
    return str(source) if isinstance(source, Path) else "inline"


def load(env: Mapping[str, str] | None = None) -> Connection:
    """The profile `env` (default: this process's environment) selects, with its overrides.

    Raises:
        ProfileError: The config file named does not exist, or has no such profile.
    """
    env = os.environ if env is None else env
    config_file = env.get("TEMPORAL_CONFIG_FILE") or None
    if config_file and not Path(config_file).is_file():
        raise ProfileError(f"TEMPORAL_CONFIG_FILE={config_file}: no such file")
    profile = env.get("TEMPORAL_PROFILE") or DEFAULT_PROFILE
    try:
        raw = ClientConfigProfile.load(override_env_vars=dict(env))
        tls_config = raw.to_client_connect_config().get("tls", False)
    except (OSError, RuntimeError, ValueError) as err:
        where = config_file or "the default temporal.toml"
        raise ProfileError(f"Temporal profile {profile!r} from {where}: {err}") from None
    tls = raw.tls
    return Connection(
        profile=profile,
        config_file=config_file,
        address=raw.address or DEFAULT_ADDRESS,
        namespace=raw.namespace or DEFAULT_NAMESPACE,
        api_key=raw.api_key,
        tls=tls_config is not False,
        server_name=tls.server_name if tls else None,
        server_ca_cert=_source(tls.server_root_ca_cert) if tls else None,
        client_cert=_source(tls.client_cert) if tls else None,
        client_key=_source(tls.client_private_key) if tls else None,
        raw=raw,
    )


def codec_origins(connection: Connection, dev_origins: tuple[str, ...]) -> tuple[str, ...]:
    """The Web UI origins the codec server allows: Cloud's UI for a Cloud namespace, else local."""
    return (CLOUD_UI_ORIGIN, *dev_origins) if connection.cloud else dev_origins
