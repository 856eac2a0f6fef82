"""An approval's answer says what it led to, on every surface a person approves from.

A buy waits for approval on a quote; the price moves and the approval comes after the quote's
window, so the run reads it again and refuses the buy. The approver hears that, not a bare
"approved": from the console's API (`runs: false`), its page, and the CLI. A control run whose
price holds answers `runs: true`. Real parts: the dev server, a worker, the console's ASGI app,
the CLI as a process of its own, a SQLite market.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import httpx
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from tests.cli import ROOT, waypoint
from tests.conftest import running_worker, the_pending_approval
from tests.test_console import make_console, sign_in
from tests.test_reads_as_seen import PAST, Market, market_tools, trader
from waypoint._console.app import build_app
from waypoint.client import runs
from waypoint.protocol import APPROVED_NOT_RUN, PendingApproval
from waypoint.testing import reply, text, tool_use

SCRIPT = [
    reply(tool_use("quote", item="gold")),
    reply(tool_use("buy", item="gold", price=100)),
    reply(text("Done.")),
]


async def waiting_buy(client: Client, market: Market, task_queue: str, moved: bool) -> Any:
    """A run whose buy waits for approval past its quote's window; the price moved or not."""
    handle = await runs.start_run(client, "trader", "buy gold", task_queue=task_queue)
    pending = await the_pending_approval(client, handle.id)
    if moved:
        market.set_price("gold", 120)
    await asyncio.sleep(PAST)
    return handle, pending


def body(pending: PendingApproval) -> dict[str, str]:
    return {"step_id": pending.step_id, "arguments_hash": pending.arguments_hash}


async def test_the_console_and_the_cli_say_an_approved_call_was_not_run(
    client: Client, env: WorkflowEnvironment, tmp_path: Path, task_queue: str
) -> None:
    market = Market(tmp_path / "market.db")
    market.set_price("gold", 100)
    console = make_console(client, tmp_path, task_queue)
    transport = httpx.ASGITransport(app=build_app(console))
    token = {"Authorization": "Bearer wpt_mix-token"}  # an approver of every agent but payer
    cli_env = {
        **os.environ,
        "TEMPORAL_ADDRESS": env.client.service_client.config.target_host,
        "TEMPORAL_NAMESPACE": "default",
        "PYTHONPATH": str(ROOT),
    }
    async with (
        httpx.AsyncClient(transport=transport, base_url="http://console") as http,
        running_worker(client, [trader(market_tools(market), SCRIPT)], task_queue),
    ):
        # The API: the price held, the buy runs; then it moved, the buy is refused.
        held, pending = await waiting_buy(client, market, task_queue, moved=False)
        ran = await http.post(f"/api/runs/{held.id}/approve", json=body(pending), headers=token)
        assert ran.status_code == 200 and ran.json()["runs"] is True, ran.text
        await held.result()
        moved, pending = await waiting_buy(client, market, task_queue, moved=True)
        refused = await http.post(
            f"/api/runs/{moved.id}/approve", json=body(pending), headers=token
        )
        assert refused.status_code == 200 and refused.json()["runs"] is False, refused.text
        assert refused.json()["detail"].startswith(APPROVED_NOT_RUN), refused.text
        assert "gold: 120" in refused.json()["detail"]
        await moved.result()

        # The page: the approve form's redirect says it, and so does the page it lands on.
        market.set_price("gold", 100)
        paged, pending = await waiting_buy(client, market, task_queue, moved=True)
        csrf = await sign_in(http, "ops")
        form = await http.post(f"/runs/{paged.id}/approve", data={**body(pending), "csrf": csrf})
        assert form.status_code == 303 and "said=approved_not_run" in form.headers["location"]
        page = await http.get(form.headers["location"])
        assert "but it was not run" in page.text, page.text
        await paged.result()

        # The CLI prints the refusal under the receipt.
        market.set_price("gold", 100)
        cli_run, pending = await waiting_buy(client, market, task_queue, moved=True)
        approved = await asyncio.to_thread(
            waypoint, cli_env, "approve", cli_run.id, pending.step_id, "--reviewer", "desk"
        )
        assert approved.returncode == 0, approved.stderr
        assert f"approved {pending.step_id}" in approved.stdout, approved.stdout
        assert APPROVED_NOT_RUN.strip() in " ".join(approved.stderr.split()), approved.stderr
        await cli_run.result()
    assert market.purchases() == [("gold", 100)], "only the run whose price held bought"
