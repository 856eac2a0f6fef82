"""Reading a run never writes to its history: a waiting run watched by a crowd stays as it was."""

from __future__ import annotations

import asyncio
from functools import partial
from pathlib import Path

import httpx
from temporalio.client import Client

from tests.agents import PAY_SCRIPT, Payments, build_agent
from tests.conftest import running_worker, the_pending_approval, wait_until
from tests.support.history import does_nothing_of_its_own
from tests.test_console import make_console, sign_in
from tests.test_console_events import TOKEN, frames
from waypoint._console.serve import start_console
from waypoint.client import runs
from waypoint.protocol.events import RunEvent, StateChanged

READERS = 60
"""`runs.events` readers, as `waypoint watch` and the console's streams read."""
STREAMS = 40
"""Server-Sent Event streams of the console's API, each a browser tab's."""


async def _until_parked(client: Client, run: str, seen: asyncio.Event) -> None:
    """Read the run as `waypoint watch` does; say so once caught up to its wait, read on."""
    event: RunEvent
    async for event in runs.events(client, run):
        if isinstance(event, StateChanged) and event.state == "awaiting_approval":
            seen.set()


async def _tab(http: httpx.AsyncClient, run: str, seen: asyncio.Event) -> None:
    """A browser tab on the run: its page, then its event stream, caught up to the wait."""
    assert (await http.get(f"/api/runs/{run}")).status_code == 200
    async with http.stream("GET", f"/api/runs/{run}/events") as stream:
        async for frame in frames(stream):
            if frame["event"] == "state_changed" and "awaiting_approval" in frame["data"]:
                seen.set()


async def test_a_hundred_viewers_add_nothing_to_a_waiting_runs_history(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    agent = build_agent(Payments(tmp_path / "p.db"), PAY_SCRIPT, approval=True)
    console = await start_console(make_console(client, tmp_path, task_queue), port=0)
    async with (
        running_worker(client, [agent], task_queue),
        httpx.AsyncClient(base_url=console.url(), headers=TOKEN, timeout=60) as http,
    ):
        handle = await runs.start_run(client, "payer", "pay ada 5", task_queue=task_queue)
        await the_pending_approval(client, handle.id)
        settled = partial(does_nothing_of_its_own, handle)  # its notice plan read, ...
        await wait_until(settled, "the waiting run does nothing more of its own")
        before = (await handle.describe()).history_length
        caught_up = [asyncio.Event() for _ in range(READERS + STREAMS)]
        viewers = [
            asyncio.create_task(_until_parked(client, handle.id, seen))
            for seen in caught_up[:READERS]
        ] + [asyncio.create_task(_tab(http, handle.id, seen)) for seen in caught_up[READERS:]]
        await asyncio.wait_for(asyncio.gather(*(seen.wait() for seen in caught_up)), 60)
        page = httpx.AsyncClient(base_url=console.url(), timeout=30)
        await sign_in(page, "vic")
        assert (await page.get(f"/runs/{handle.id}")).status_code == 200  # the run's page
        await asyncio.sleep(2.5)  # they keep watching: several looks each, at the waiting pace
        for viewer in viewers:  # and leave
            viewer.cancel()
        await asyncio.gather(*viewers, return_exceptions=True)
        await page.aclose()
        after = (await handle.describe()).history_length
        history = await handle.fetch_history()
        await handle.terminate("test over")
    await console.stop()
    assert after == before, f"{after - before} events written by readers"
    signals = [
        e for e in history.events if e.HasField("workflow_execution_signaled_event_attributes")
    ]
    updates = [
        e
        for e in history.events
        if e.HasField("workflow_execution_update_accepted_event_attributes")
    ]
    assert signals == [] and updates == []
