"""With encryption keys set, no byte at rest holds a run's secrets.

Not the server's database, not a file under the state folder, not the worker's log. Without
keys the same run leaks them, so the test can fail.
"""

from __future__ import annotations

import base64
import os
from datetime import timedelta
from pathlib import Path

from tests.canary_app import IBAN, VAT
from waypoint._operations.dev_server import start_dev_server
from waypoint._operations.processes import free_port
from waypoint.client import runs
from waypoint.protocol import StepOptions
from waypoint.settings import Settings, connect, converter_from_settings
from waypoint.testing import WorkerProcess

ROOT = Path(__file__).parent.parent
KEY = "k1:" + base64.b64encode(b"\x07" * 32).decode()
QUICK = StepOptions(retry_initial_interval=timedelta(milliseconds=50))


def canary_hits(paths: list[Path]) -> dict[str, int]:
    """How many canaries each file holds."""
    hits: dict[str, int] = {}
    for path in paths:
        data = path.read_bytes()
        for canary in (IBAN, VAT):
            if canary.encode() in data:
                hits[str(path)] = hits.get(str(path), 0) + 1
    return hits


async def run_and_collect(tmp_path: Path, encrypted: bool) -> dict[str, int]:
    state = tmp_path / "state"
    server = start_dev_server(state / "server", port=free_port())
    log = tmp_path / "worker.log"
    env = {
        **os.environ,
        "TEMPORAL_ADDRESS": server.address,
        "PYTHONPATH": str(ROOT),
        "CANARY_DB": str(tmp_path / "bank.db"),
        "WAYPOINT_PAYLOAD_STORE": str(state / "payloads"),
        "WAYPOINT_PAYLOAD_THRESHOLD": "512",  # most payloads go to the store: check it too
        "WAYPOINT_TRANSCRIPT_STORE": str(state / "transcripts"),
        "WAYPOINT_TASK_QUEUE": "canary",
    }
    env.pop("WAYPOINT_ENCRYPTION_KEYS", None)
    if encrypted:
        env["WAYPOINT_ENCRYPTION_KEYS"] = KEY
    worker = WorkerProcess("tests.canary_app:agents", env, log)
    try:
        worker.start()
        settings = Settings(
            payload_store=state / "payloads",
            payload_threshold=512,
            encryption_keys=KEY if encrypted else None,
        )
        client = await connect(
            {"target_host": server.address}, data_converter=converter_from_settings(settings)
        )
        handle = await runs.start_run(
            client, "canary", f"Pay the supplier {IBAN}", task_queue="canary", options=QUICK
        )
        while not (await runs.status(client, handle.id, timeout=10)).pending_approvals:
            pass
        await runs.approve(client, handle.id, "t2.tool.1.pay", reviewer="ops")
        result = await handle.result()
        assert IBAN in result.output  # the client, holding the keys, reads everything
        assert worker.stop() == 0
    finally:
        worker.kill()
        server.stop()
    files = [p for p in state.rglob("*") if p.is_file()] + [log]
    assert any(p.name.startswith("temporal.db") for p in files)
    return canary_hits(files)


async def test_no_canary_at_rest_with_encryption_on(tmp_path: Path) -> None:
    assert await run_and_collect(tmp_path, encrypted=True) == {}
    log = (tmp_path / "worker.log").read_text()
    assert "ValueError; details withheld: encryption is on]" in log  # logged, but redacted


async def test_the_same_run_leaks_canaries_without_encryption(tmp_path: Path) -> None:
    hits = await run_and_collect(tmp_path, encrypted=False)
    assert any("temporal.db" in path for path in hits)
    assert any("worker.log" in path for path in hits)  # the failed lookup's error text
