"""A run's evidence on its console page and API: what it was given, every step's whole arguments
and result, what a tool does and what approving does, and who stopped it, when and why.

A real dev server and worker; the console app over HTTP (httpx's ASGI transport). Every read
here is checked to add nothing to the run's history.
"""

from __future__ import annotations

import html
from pathlib import Path

import httpx
from pydantic import BaseModel
from temporalio.client import Client

from tests.agents import Payments, build_agent, with_tools
from tests.conftest import running_worker, the_pending_approval, wait_for_state
from tests.test_console import make_console, sign_in
from waypoint.client import runs
from waypoint.client.evidence import PREVIEW_CHARS
from waypoint.console.app import build_app
from waypoint.testing import reply, text, tool_use
from waypoint.tools import tool

SANCTIONS = "no_match: " + "; ".join(f"list {n} checked, no entry" for n in range(400))
"""A read's result far longer than a page's preview: the issue's sanctions screen, cut at 120."""


class Payee(BaseModel):
    name: str


@tool("read")
async def screen(args: Payee) -> str:
    """Screen a payee against the sanctions lists."""
    return SANCTIONS


async def history_length(client: Client, run: str) -> int:
    return len([e async for e in client.get_workflow_handle(run).fetch_history_events()])


async def test_a_stopped_run_says_who_when_and_why_and_shows_every_step_whole(
    client: Client, tmp_path: Path, task_queue: str
) -> None:
    payments = Payments(tmp_path / "payments.db")
    script = [
        reply(
            text("Screening ada first."),
            tool_use("weather", city="Oslo"),
            tool_use("screen", name="ada"),
        ),
        reply(text("Clear; paying ada."), tool_use("pay", payee="ada", amount=5)),
        reply(text("Paid.")),
    ]
    agent = with_tools(build_agent(payments, script, approval=True), screen)
    console = make_console(client, tmp_path, task_queue)
    transport = httpx.ASGITransport(app=build_app(console))
    async with (
        httpx.AsyncClient(transport=transport, base_url="http://console") as http,
        running_worker(client, [agent], task_queue),
    ):
        handle = await runs.start_run(client, "payer", "Pay ada 5 EUR.", task_queue=task_queue)
        pending = await the_pending_approval(client, handle.id)
        ops = {"Authorization": "Bearer wpt_ops-token"}
        before = await history_length(client, handle.id)
        shown = (await http.get(f"/api/runs/{handle.id}", headers=ops)).json()
        assert shown["task"] == "Pay ada 5 EUR."
        weather = shown["steps"]["t1.tool.1.weather"]
        assert weather["arguments"] == '{\n  "city": "Oslo"\n}' and weather["whole"]
        assert weather["result"] == "sunny in Oslo"
        assert shown["steps"]["t1.model"]["words"] == "Screening ada first."
        assert shown["tools"]["pay"]["description"] == "Pay someone."
        assert "once with exactly these arguments" in shown["tools"]["pay"]["on_approve"]
        assert shown["timings"]["t1.tool.1.weather"]["ended_at"] is not None
        cut = shown["steps"]["t1.tool.2.screen"]  # a preview that says it is one
        assert not cut["whole"] and cut["result"] == SANCTIONS[:PREVIEW_CHARS]
        assert cut["result_chars"] == len(SANCTIONS) > PREVIEW_CHARS
        whole = await http.get(f"/api/runs/{handle.id}/steps/t1.tool.2.screen", headers=ops)
        assert whole.json()["result"] == SANCTIONS and whole.json()["whole"]
        missing = await http.get(f"/api/runs/{handle.id}/steps/t9.nothing", headers=ops)
        assert missing.status_code == 404
        await sign_in(http, "vic")
        page = html.unescape((await http.get(f"/runs/{handle.id}")).text)
        assert "Pay ada 5 EUR." in page and "Pay someone." in page and "sunny in Oslo" in page
        assert "once with exactly these arguments" in page and "Show all of it" in page
        assert "Cancel run" not in page  # a viewer: no verb's form
        step_page = html.unescape(
            (await http.get(f"/runs/{handle.id}/steps/t1.tool.2.screen")).text
        )
        assert SANCTIONS[-200:] in step_page
        assert await history_length(client, handle.id) == before  # reading wrote nothing
        done = await http.post(
            f"/api/runs/{handle.id}/cancel", json={"reason": "fraud suspected"}, headers=ops
        )
        assert done.status_code == 200, done.text
        await wait_for_state(client, handle.id, "cancelled")
        shown = (await http.get(f"/api/runs/{handle.id}", headers=ops)).json()
    assert shown["state"] == "cancelled"
    stopped = shown["stopped"]
    assert (stopped["by"], stopped["why"]) == ("ops-app via console", "fraud suspected")
    assert stopped["at"]
    assert shown["not_run"][pending.step_id].startswith("not run: the run was cancelled")
    assert shown["steps"]["t2.model"]["words"] == "Clear; paying ada."
    assert payments.count() == 0
