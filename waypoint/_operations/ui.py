"""Where the Temporal Web UI is, so links point at the server actually in use.

`WAYPOINT_UI_URL` wins. Otherwise the embedded server's record (written when it starts, in
`~/.waypoint/dev_server.json` or `$WAYPOINT_HOME`) names its UI when its address is the one we
connect to; failing that, a local server's UI is guessed at port + 1000, the dev server's rule.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from urllib.parse import quote

from waypoint._security.private import private_dir, write_private


def home() -> Path:
    """Waypoint's per-user folder (not the project's `.waypoint`): the server record lives here."""
    return Path(os.environ.get("WAYPOINT_HOME") or Path.home() / ".waypoint")


def record_path() -> Path:
    """The embedded server's record."""
    return home() / "server.json"


def record_server(address: str, ui_url: str, state_dir: Path) -> None:
    """Remember the server just started, so links and `server --stop` find it from anywhere."""
    path = record_path()
    try:
        private_dir(path.parent)
        record = {"address": address, "ui_url": ui_url, "state_dir": str(state_dir.resolve())}
        write_private(path, json.dumps(record))
    except OSError:
        pass  # links fall back to the port rule; nothing else depends on the record


def recorded_server() -> dict[str, str]:
    """The last embedded server's record, or {}."""
    try:
        record = json.loads(record_path().read_text())
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def ui_base(address: str, override: str = "") -> str:
    """The Web UI's base URL for the server at `address`."""
    if override:
        return override.rstrip("/")
    record = recorded_server()
    if record.get("address") == address and record.get("ui_url"):
        return record["ui_url"].rstrip("/")
    host, _, port = address.rpartition(":")
    if host.endswith(".tmprl.cloud"):
        return "https://cloud.temporal.io"
    if port.isdigit():
        return f"http://{host or '127.0.0.1'}:{int(port) + 1000}"
    return "http://127.0.0.1:8233"


def run_link(base: str, namespace: str, run: str) -> str:
    """A run's page."""
    return f"{base}/namespaces/{quote(namespace)}/workflows/{quote(run, safe='')}"


def list_link(base: str, namespace: str, query: str) -> str:
    """The workflow list, filtered by a visibility query (the UI reads it from `?query=`)."""
    return f"{base}/namespaces/{quote(namespace)}/workflows?query={quote(query, safe='')}"
