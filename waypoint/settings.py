"""What the environment configures, and how to connect: `Settings`, `connect`, the stores.

Configuration is read here and in the CLI (`waypoint._cli`) only. Temporal connection settings
come from a `temporalio.envconfig` profile (`waypoint._operations.connection`: a TOML profile, TLS
client certificates or an API key, `TEMPORAL_*` overrides), so one worker talks to the embedded dev
server, a cluster or Temporal Cloud.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from pydantic import BaseModel
from temporalio.client import Client, Interceptor
from temporalio.converter import DataConverter
from temporalio.service import RPCError

from waypoint._operations import connection
from waypoint._providers.claude.backends import BACKENDS, DEFAULT_TIMEOUT, Backend
from waypoint.errors import (
    ModelNotConfiguredError,
    ServerNotReachableError,
    SettingsError,
    StoreConfigError,
)
from waypoint.stores.payloads import DEFAULT_THRESHOLD
from waypoint.stores.payloads import data_converter as storage_converter
from waypoint.stores.transcripts import TranscriptStore

if TYPE_CHECKING:
    from waypoint._security.codec import EncryptionCodec
    from waypoint.stores.blobs import Backend as StoreBackend

DEFAULT_ADDRESS = connection.DEFAULT_ADDRESS
DEFAULT_TASK_QUEUE = "waypoint"
DEFAULT_APP = "waypoint.demo:agents"
DEFAULT_DRAIN_SECONDS = 30.0


class Settings(BaseModel):
    """Waypoint's own settings, from `WAYPOINT_*` environment variables."""

    task_queue: str = DEFAULT_TASK_QUEUE
    app: str = DEFAULT_APP
    """`module:attribute` naming an Agent, a list of them, or a function returning them."""
    use_anthropic: bool = False
    """True when `ANTHROPIC_API_KEY` or `ANTHROPIC_AUTH_TOKEN` is set, or `WAYPOINT_CLAUDE`
    names a cloud: agents call Claude instead of their script."""
    claude_backend: Backend = "anthropic"
    """How Claude is reached (`WAYPOINT_CLAUDE`): `anthropic` (the API, `ANTHROPIC_API_KEY` or
    `ANTHROPIC_AUTH_TOKEN`), `bedrock` (AWS credentials and `AWS_REGION`) or `vertex`
    (Google credentials, `CLOUD_ML_REGION`, `ANTHROPIC_VERTEX_PROJECT_ID`)."""
    model_timeout: float = DEFAULT_TIMEOUT
    """Seconds the Claude client waits to connect or between streamed chunks
    (`WAYPOINT_MODEL_TIMEOUT`); a stalled call fails and Temporal retries it."""
    step_log: Path | None = None
    """Append one line per step execution here (kill tests count re-runs across processes)."""
    scripted_latency: float = 0.0
    """Seconds each scripted model reply takes (demo pacing, kill tests)."""
    drain_seconds: float = DEFAULT_DRAIN_SECONDS
    """How long a SIGTERMed worker lets running activities finish (`WAYPOINT_DRAIN_SECONDS`)
    before it cancels them; a cancelled step is retried elsewhere, its effect reconciled. A
    plain `def` tool cannot be cancelled: the worker waits for its thread and reports it."""
    max_cached_workflows: int = 200
    """Runs kept in the worker's cache: a cached parked run costs ~0.3 MB, an evicted one
    replays its history (0.1-0.4 s) on its next task; 0 replays every task."""
    ui_url: str = ""
    """The Web UI's address (`WAYPOINT_UI_URL`); empty: the embedded server's, or port + 1000."""
    operator: str = "operator"
    """Who approvals, corrections and resolutions are recorded as, by default."""
    payload_store: Path | None = Path(".waypoint/payloads").absolute()
    """Content-addressed store for payloads above the threshold; `WAYPOINT_PAYLOAD_STORE=off`
    keeps every payload inline. Worker and CLI must share it."""
    payload_threshold: int = DEFAULT_THRESHOLD
    encryption_keys: str | None = None
    """`id:base64key,...` or `@file` (see `waypoint._security.codec`): encrypt every payload
    when set."""
    transcript_store: Path = Path(".waypoint/transcripts").absolute()
    """Where model steps keep transcript messages; share it between workers of one queue."""
    attempt_journal: Path | None = Path(".waypoint/attempts").absolute()
    """Where a worker notes the attempts it runs, so its restart frees a killed one's at once
    (`waypoint._activities.journal`): a writable local disk that outlives the process and that
    the restarted worker shares (a pod's `emptyDir`, a host path; the image sets
    `/var/lib/waypoint/attempts`). `WAYPOINT_ATTEMPT_JOURNAL=off` leaves them to time out."""
    store_url: str | None = None
    """`WAYPOINT_STORE=s3://bucket/prefix`: both stores in that bucket (`payloads/` and
    `transcripts/` under the prefix) instead of the two folders; AWS settings from the usual
    `AWS_*` variables (`waypoint-agents[s3]`, see `waypoint.stores.s3`)."""
    store_region: str | None = None
    """`AWS_REGION` for the bucket; boto3 itself reads only `AWS_DEFAULT_REGION`."""
    prices_file: Path | None = None
    """Negotiated prices (TOML, or JSON by suffix) that win over list prices; see `pricing`."""
    otlp_endpoint: str | None = None
    """OTLP/HTTP traces URL (`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, or `OTEL_EXPORTER_OTLP_ENDPOINT`
    plus `/v1/traces`): trace every step there (`waypoint-agents[otel]`; see
    `waypoint._operations.tracing`)."""
    trace_file: Path | None = None
    """Also append every span here as a JSON line (`WAYPOINT_TRACE_FILE`; tests, debugging)."""
    trace_details: bool | None = None
    """Whether spans carry an error's message and stack trace (`WAYPOINT_TRACE_DETAILS=1|0`):
    by default yes, and no once encryption keys are set, since they may hold the run's data;
    `1` is for a collector trusted with it."""
    refuse_plaintext: bool = True
    """With encryption keys set, new runs refuse unencrypted decisions, answers, notes and
    policies (`WAYPOINT_REFUSE_PLAINTEXT=0` accepts them; see `waypoint._security.plaintext`)."""
    deployment: str | None = None
    """The worker deployment this worker belongs to (`WAYPOINT_DEPLOYMENT`); with `build_id`
    it turns worker versioning on (see `waypoint._operations.deploys`); unset: unversioned."""
    build_id: str | None = None
    """This worker's build within the deployment (`WAYPOINT_BUILD_ID`), e.g. `v2` or a git sha."""
    decision_keys: str | None = None
    """Reviewers' public keys, `reviewer:BASE64,...` or `@file` (`WAYPOINT_DECISION_KEYS`): the
    worker checks signed decisions against them (`waypoint._security.signing`)."""
    decision_key: str | None = None
    """This person's private signing key, base64 or `@file` (`WAYPOINT_DECISION_KEY`): the CLI
    signs every decision with it. Keep it out of workers and payloads."""
    notify_file: Path = Path(".waypoint/_notify.toml")
    """The notifications file (`WAYPOINT_NOTIFY`): channels and per-agent routes; none there,
    nobody is notified (`waypoint._notify.config`)."""
    console_secret_file: Path = Path(".waypoint/console-secret")
    """The console's secret (`WAYPOINT_CONSOLE_SECRET`): the worker signs review links with
    it, the console checks them."""

    notice_activities: str | None = None
    """`module:attribute` naming a function that returns the activities to register in place
    of Waypoint's `waypoint.notice_plan` and `waypoint.notify` (a test's receiver)."""

    @classmethod
    def from_env(cls) -> Settings:
        """Read the environment once, at the edge of the program."""
        env = os.environ
        backend = (env.get("WAYPOINT_CLAUDE") or "anthropic").strip().lower()
        if backend not in BACKENDS:
            raise ModelNotConfiguredError(
                f"WAYPOINT_CLAUDE={backend!r}: use one of {', '.join(BACKENDS)}"
            )
        has_key = bool(env.get("ANTHROPIC_API_KEY") or env.get("ANTHROPIC_AUTH_TOKEN"))
        return cls(
            task_queue=env.get("WAYPOINT_TASK_QUEUE", DEFAULT_TASK_QUEUE),
            app=env.get("WAYPOINT_APP", DEFAULT_APP),
            use_anthropic=has_key or backend != "anthropic",
            claude_backend=cast(Backend, backend),
            model_timeout=float(env.get("WAYPOINT_MODEL_TIMEOUT") or DEFAULT_TIMEOUT),
            step_log=Path(p) if (p := env.get("WAYPOINT_STEP_LOG")) else None,
            scripted_latency=float(env.get("WAYPOINT_SCRIPTED_LATENCY") or 0),
            drain_seconds=_drain_seconds(env.get("WAYPOINT_DRAIN_SECONDS")),
            max_cached_workflows=int(env.get("WAYPOINT_MAX_CACHED_WORKFLOWS") or 200),
            ui_url=env.get("WAYPOINT_UI_URL", ""),
            operator=env.get("USER") or env.get("USERNAME") or "operator",
            payload_store=_path_or_off(env.get("WAYPOINT_PAYLOAD_STORE"), ".waypoint/payloads"),
            payload_threshold=int(env.get("WAYPOINT_PAYLOAD_THRESHOLD") or DEFAULT_THRESHOLD),
            encryption_keys=env.get("WAYPOINT_ENCRYPTION_KEYS") or None,
            transcript_store=Path(
                env.get("WAYPOINT_TRANSCRIPT_STORE") or ".waypoint/transcripts"
            ).absolute(),
            attempt_journal=_path_or_off(env.get("WAYPOINT_ATTEMPT_JOURNAL"), ".waypoint/attempts"),
            store_url=env.get("WAYPOINT_STORE") or None,
            store_region=env.get("AWS_REGION") or None,
            prices_file=Path(p) if (p := env.get("WAYPOINT_PRICES")) else None,
            otlp_endpoint=_otlp_endpoint(env),
            trace_file=Path(p).absolute() if (p := env.get("WAYPOINT_TRACE_FILE")) else None,
            trace_details={"1": True, "0": False}.get(env.get("WAYPOINT_TRACE_DETAILS", "")),
            refuse_plaintext=env.get("WAYPOINT_REFUSE_PLAINTEXT", "1") != "0",
            deployment=env.get("WAYPOINT_DEPLOYMENT") or None,
            build_id=env.get("WAYPOINT_BUILD_ID") or None,
            decision_keys=env.get("WAYPOINT_DECISION_KEYS") or None,
            decision_key=env.get("WAYPOINT_DECISION_KEY") or None,
            notice_activities=env.get("WAYPOINT_NOTICE_ACTIVITIES") or None,
            notify_file=Path(env.get("WAYPOINT_NOTIFY") or ".waypoint/_notify.toml"),
            console_secret_file=Path(
                env.get("WAYPOINT_CONSOLE_SECRET") or ".waypoint/console-secret"
            ),
        )


def ui_link(settings: Settings, run: str) -> str:
    """The run's page in the Temporal Web UI of the server we connect to."""
    from waypoint._operations import ui

    config = connect_config()
    base = ui.ui_base(config["target_host"], settings.ui_url)
    return ui.run_link(base, config.get("namespace", "default"), run)


def _drain_seconds(value: str | None) -> float:
    """`WAYPOINT_DRAIN_SECONDS`, refused with the fix when it is not a number of seconds >= 0."""
    if not value:
        return DEFAULT_DRAIN_SECONDS
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not (math.isfinite(seconds) and seconds >= 0):
        raise SettingsError(
            f"WAYPOINT_DRAIN_SECONDS={value!r}: give the seconds a stopping worker lets running "
            f"tools finish, a number >= 0 (default {DEFAULT_DRAIN_SECONDS:g})"
        )
    return seconds


def _path_or_off(value: str | None, default: str) -> Path | None:
    """A folder setting: `off` turns it off, unset is `default`, relative is to the cwd."""
    return None if value == "off" else Path(value or default).absolute()


def _otlp_endpoint(env: Mapping[str, str]) -> str | None:
    """The traces URL from the standard OpenTelemetry variables, as the exporter would read it."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    if url := env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        return url
    if url := env.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        return url.rstrip("/") + "/v1/traces"
    return None


def tracing_interceptors(settings: Settings) -> list[Interceptor]:
    """Temporal's tracing interceptor with step spans, when traces are configured."""
    if not (settings.otlp_endpoint or settings.trace_file):
        return []  # not even imported: tracing off costs nothing
    from waypoint._operations.tracing import configured_tracing

    details = settings.trace_details
    if details is None:
        details = not settings.encryption_keys
    tracing = configured_tracing(settings.otlp_endpoint, settings.trace_file, details=details)
    return [tracing] if tracing else []


def connect_config() -> dict[str, Any]:
    """Client connection settings from the envconfig profile, defaulting to the dev server."""
    return connection.load().connect_config()


async def connect(
    config: dict[str, Any] | None = None, data_converter: DataConverter | None = None
) -> Client:
    """Connect with the pydantic data converter; a missing server raises a one-line hint.

    Without an explicit converter, large payloads go to the payload store from `Settings`.
    When traces are configured, the client (and every worker built on it) traces each step.
    """
    config = config or connect_config()
    settings = Settings.from_env()
    if data_converter is None:
        data_converter = converter_from_settings(settings)
    interceptors = tracing_interceptors(settings)
    try:
        return await Client.connect(
            **config, data_converter=data_converter, interceptors=interceptors
        )
    except (RuntimeError, RPCError) as err:
        address = config.get("target_host")
        raise ServerNotReachableError(
            f"no Temporal server at {address}: start one with `waypoint server` "
            "(or set TEMPORAL_ADDRESS / a TOML profile for another cluster)"
        ) from err


def converter_from_settings(settings: Settings) -> DataConverter:
    """Pydantic payloads, large ones in the payload store, all encrypted when keys are set."""
    return storage_converter(
        payload_store(settings), settings.payload_threshold, settings.encryption_keys
    )


def _bucket(settings: Settings, part: str) -> StoreBackend:
    """One store's place in the `WAYPOINT_STORE` bucket (boto3 imported only when used)."""
    try:
        from waypoint.stores.s3 import Bucket, parse_store_url
    except ImportError as err:
        raise StoreConfigError(
            f"WAYPOINT_STORE={settings.store_url} needs boto3: pip install 'waypoint-agents[s3]'"
        ) from err
    try:
        bucket, prefix = parse_store_url(settings.store_url or "")
    except ValueError as err:
        raise StoreConfigError(str(err)) from None
    return Bucket(bucket, f"{prefix}/{part}" if prefix else part, region=settings.store_region)


def payload_store(settings: Settings) -> Path | StoreBackend | None:
    """The payload store's folder or bucket; None keeps every payload inline."""
    return _bucket(settings, "payloads") if settings.store_url else settings.payload_store


def encryption_codec(settings: Settings) -> EncryptionCodec | None:
    """The payload codec from `WAYPOINT_ENCRYPTION_KEYS`, if encryption is on.

    `_security.codec` is imported here, not at the top: the workflow sandbox re-imports this
    package's `__init__`, and the `cryptography` extension must not be loaded inside it.
    """
    if not settings.encryption_keys:
        return None
    from waypoint._security.codec import EncryptionCodec, load_keys

    keys, active = load_keys(settings.encryption_keys)
    return EncryptionCodec(keys, active)


def transcript_store(settings: Settings) -> TranscriptStore:
    """The transcript store in its folder or bucket, sealed when encryption keys are set."""
    from waypoint.stores.sealing import sealer_from_spec

    sealer = sealer_from_spec(settings.encryption_keys)
    where = _bucket(settings, "transcripts") if settings.store_url else settings.transcript_store
    return TranscriptStore(where, sealer=sealer)
