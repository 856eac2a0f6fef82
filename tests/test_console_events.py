"""A run's events over Server-Sent Events from a real console: a late reader catches up, a
dropped connection resumes by `Last-Event-ID` with no gap and no repeat, a slow reader gets
every event in order."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from temporalio.client import Client

from tests.agents import Payments
from tests.conftest import payer_run, the_pending_approval
from tests.test_console import make_console
from waypoint._console.people import hash_token, save_entry
from waypoint._console.serve import RunningConsole, start_console
from waypoint.client import runs

APP = "wpt_app-token"
TOKEN = {"Authorization": f"Bearer {APP}"}


@pytest.fixture
async def served(client: Client, tmp_path: Path, task_queue: str) -> AsyncIterator[RunningConsole]:
    running = await start_console(make_console(client, tmp_path, task_queue), port=0)
    try:
        yield running
    finally:
        await running.stop()


async def frames(response: httpx.Response, pause: float = 0.0) -> AsyncIterator[dict[str, str]]:
    """The SSE frames of a streaming response, as {id, event, data}; `pause` after each."""
    frame: dict[str, str] = {}
    async for line in response.aiter_lines():
        if not line:
            if "event" in frame:
                yield frame
                if pause:
                    await asyncio.sleep(pause)
            frame = {}
            continue
        name, _, value = line.partition(":")
        frame[name] = value.removeprefix(" ")


async def read_until(response: httpx.Response, kind: str, pause: float = 0.0) -> list[dict]:
    seen = []
    async for frame in frames(response, pause):
        seen.append(frame)
        if frame["event"] == kind:
            break
    return seen


async def test_a_dropped_reader_resumes_with_no_gap_and_no_repeat(
    client: Client, tmp_path: Path, task_queue: str, served: RunningConsole
) -> None:
    payments = Payments(tmp_path / "payments.db")
    async with (
        payer_run(client, task_queue, payments) as handle,
        httpx.AsyncClient(base_url=served.url(), headers=TOKEN, timeout=60) as http,
    ):
        pending = await the_pending_approval(client, handle.id)
        url = f"/api/runs/{handle.id}/events"
        for odd in ("\u00b2".encode("latin-1"), b"9" * 5000, b"99999999999999999999"):
            async with http.stream("GET", url, headers={"Last-Event-ID": odd}) as ignored:
                assert ignored.status_code == 200  # not a number we take: read from the start
                assert (await read_until(ignored, "step_scheduled"))[0]["id"] == "0"
        async with http.stream("GET", url) as first:  # a late reader: the past first
            assert first.headers["content-type"].startswith("text/event-stream")
            before = await read_until(first, "approval_requested")
        # The connection dropped; the run moves on without the reader.
        await runs.approve(client, handle.id, pending.step_id, reviewer="test", timeout=10)
        await handle.result()
        last = before[-1]["id"]
        async with http.stream("GET", url, headers={"Last-Event-ID": last}) as again:
            after = await read_until(again, "end", pause=0.05)  # and a slow one
    ids = [int(f["id"]) for f in before + after if f.get("id")]
    assert ids == list(range(ids[0], ids[0] + len(ids))), ids  # no gap, no repeat
    kinds = [f["event"] for f in before + after]
    assert kinds[0] == "step_scheduled" and kinds[-2:] == ["run_ended", "end"]
    assert "approval_decided" in kinds and kinds.count("approval_requested") == 1
    ended = json.loads(after[-2]["data"])
    assert ended["state"] == "done" and payments.count() == 1


async def test_event_stream_refusals(
    client: Client, tmp_path: Path, task_queue: str, served: RunningConsole
) -> None:
    async with httpx.AsyncClient(base_url=served.url(), timeout=30) as http:
        assert (await http.get("/api/runs/nope/events")).status_code == 401
        missing = await http.get("/api/runs/no-such-run/events", headers=TOKEN)
        assert missing.status_code == 404, missing.text
        assert missing.headers["content-type"] == "application/problem+json"
        bad = await http.get("/api/runs/x/events?offset=-1", headers=TOKEN)
        assert bad.status_code == 422


async def test_an_idle_stream_is_cut_on_a_timer_once_its_reader_loses_the_role(
    client: Client, tmp_path: Path, task_queue: str, served: RunningConsole
) -> None:
    """A run waiting for approval sends no event; the reader is cut all the same."""
    console = served.app.state.console
    console.recheck_seconds = 1.0
    payments = Payments(tmp_path / "payments.db")
    async with (
        payer_run(client, task_queue, payments) as handle,
        httpx.AsyncClient(base_url=served.url(), headers=TOKEN, timeout=60) as http,
    ):
        await the_pending_approval(client, handle.id)
        async with http.stream("GET", f"/api/runs/{handle.id}/events") as stream:
            seen = frames(stream)
            async for frame in seen:
                if frame["event"] == "state_changed" and "awaiting_approval" in frame["data"]:
                    break  # nothing more comes until someone decides
            save_entry(console.people_file, "tokens", "app", hash_token(APP), {"other": "viewer"})
            taken = time.monotonic()
            async with asyncio.timeout(10):
                async for last in seen:
                    if last["event"] in ("error", "end"):
                        break
            assert last["event"] == "error" and "no longer" in last["data"], last
            assert time.monotonic() - taken < console.recheck_seconds + 5
        await handle.terminate("test done")
