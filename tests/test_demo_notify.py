"""`waypoint demo --notify-url` tells a local receiver that the demo's run waits for a person.

The demo runs as the README's command does, without `--yes` and with no terminal: it waits
for a person. Its webhook reaches a receiver on loopback that checks the signature; the
notice's review link opens the run in the demo's own console; an approval ends the demo.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path

import httpx
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from tests.cli import BIN
from tests.notify_receivers import Receiver
from waypoint._operations.processes import free_port
from waypoint.client import runs

SECRET = "demo-hook-secret"


async def test_the_demo_tells_a_local_receiver_with_a_link_to_its_console(
    env: WorkflowEnvironment, client: Client, tmp_path: Path, task_queue: str
) -> None:
    hook = await Receiver(secret=SECRET).start()
    port = free_port()
    demo_env = {
        **os.environ,
        "TEMPORAL_ADDRESS": env.client.service_client.config.target_host,
        "WAYPOINT_TASK_QUEUE": task_queue,
        "WAYPOINT_DEMO_DIR": str(tmp_path / "demo"),
        "WAYPOINT_CONSOLE_PORT": str(port),
        "WAYPOINT_DEMO_NOTIFY_SECRET": SECRET,
        "COLUMNS": "200",
    }
    demo = subprocess.Popen(
        [str(BIN / "waypoint"), "demo", "--notify-url", hook.url],
        env=demo_env,
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,  # no terminal: the demo waits for a person
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        await asyncio.wait_for(hook.arrived.wait(), 60)
        (told,) = hook.requests
        assert hook.forged == 0 and len(hook.keys) == 1  # signed with $WAYPOINT_DEMO_NOTIFY_SECRET
        sent = told.json()
        notice = sent["notice"]
        assert (notice["event"], notice["agent"]) == ("waiting", "vendor_onboarding")
        assert notice["step_id"] == "t4.tool.1.create_vendor"
        console = f"http://127.0.0.1:{port}"
        assert sent["link"].startswith(f"{console}/r/")
        async with httpx.AsyncClient() as browser:  # the link opens the run in that console
            opened = await browser.get(sent["link"])
            assert opened.status_code == 303, opened.text
            assert opened.headers["location"] == f"/runs/{notice['run']}"
        await runs.approve(client, notice["run"], notice["step_id"], reviewer="ann")
        out, err = await asyncio.to_thread(demo.communicate, timeout=90)
    finally:
        if demo.poll() is None:
            demo.kill()
            demo.communicate()
        await hook.stop()
    assert demo.returncode == 0, out + err
    assert f"console   {console}" in out
    assert f"notices   {hook.url}" in out
    assert "Northwind Components GmbH is onboarded." in out
    events = [r.json()["notice"]["event"] for r in hook.requests]
    assert events == ["waiting", "decided"]  # then told it was decided, and by whom
    assert hook.requests[1].json()["notice"]["decided_by"].startswith("ann")
