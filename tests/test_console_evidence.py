"""A run's evidence on its console page and API: what it was given, every step's whole arguments
and result, what a tool does and what approving does, and who stopped it, when and why.

A real dev server and worker; the console app over HTTP (httpx's ASGI transport). Every read
here is checked to add nothing to the run's history.
"""

from __future__ import annotations

import html
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from urllib.parse import quote

import httpx
from pydantic import BaseModel
from temporalio.client import Client

from tests.agents import PAY_SCRIPT, Payments, build_agent, with_tools
from tests.conftest import running_worker, the_pending_approval, wait_for_state, wait_until
from tests.subagent_agents import build_agents
from tests.support.history import does_nothing_of_its_own
from tests.test_console import make_console, sign_in
from tests.test_durability import reader
from tests.test_rich_content import PDF, png
from tests.test_server_blocks import CITED, RESULTS, SEARCH
from waypoint import document, image
from waypoint._agent import Agent
from waypoint._console.app import build_app
from waypoint._tools import tool
from waypoint.client import runs
from waypoint.client.evidence import PREVIEW_CHARS
from waypoint.protocol.messages import ServerBlock, TextBlock
from waypoint.testing import reply, text, tool_use

OPS = {"Authorization": "Bearer wpt_ops-token"}

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
        settled = partial(does_nothing_of_its_own, handle)  # its notice plan read, ...
        await wait_until(settled, "the waiting run does nothing more of its own")
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


@asynccontextmanager
async def console_over(
    client: Client, tmp_path: Path, task_queue: str, agents: list[Agent]
) -> AsyncIterator[httpx.AsyncClient]:
    """The console app over HTTP (ASGI) and a worker for `agents`."""
    transport = httpx.ASGITransport(app=build_app(make_console(client, tmp_path, task_queue)))
    async with (
        httpx.AsyncClient(transport=transport, base_url="http://console") as http,
        running_worker(client, agents, task_queue),
    ):
        yield http


async def ended_and_read(
    client: Client, http: httpx.AsyncClient, agent: str, task_queue: str
) -> tuple[dict, str]:
    """Run `agent` to its end; its API answer (an operator's) and its page (a viewer's)."""
    handle = await runs.start_run(client, agent, "go", task_queue=task_queue)
    await handle.result()
    shown = (await http.get(f"/api/runs/{handle.id}", headers=OPS)).json()
    await sign_in(http, "vic")
    return shown, html.unescape((await http.get(f"/runs/{handle.id}")).text)


async def test_a_runs_attachments_open_for_its_viewers_and_a_missing_one_is_a_404(
    client: Client, tmp_path: Path, task_queue: str
) -> None:
    picture, invoice = png(3, 3), document(PDF, title="invoice 7.pdf")
    agent = build_agent(Payments(tmp_path / "payments.db"), PAY_SCRIPT)
    async with console_over(client, tmp_path, task_queue, [agent]) as http:
        handle = await runs.start_run(
            client, "payer", "pay ada 5", task_queue=task_queue,
            attachments=[image(picture), invoice],
        )  # fmt: skip
        await handle.result()
        url = f"/api/runs/{handle.id}/attachments"
        assert (await http.get(f"{url}/1")).status_code == 401
        before = await history_length(client, handle.id)
        shown = await http.get(f"{url}/1", headers=OPS)
        assert shown.status_code == 200 and shown.content == picture
        assert shown.headers["content-type"] == "image/png"
        assert shown.headers["content-disposition"].startswith("inline")
        assert "sandbox" in shown.headers["content-security-policy"]
        pdf = await http.get(f"{url}/2", headers=OPS)
        assert pdf.content == PDF and pdf.headers["content-type"] == "application/pdf"
        assert pdf.headers["content-disposition"] == 'attachment; filename="invoice 7.pdf"'
        missing = await http.get(f"{url}/3", headers=OPS)
        assert missing.status_code == 404 and "no attachment 3" in missing.json()["detail"]
        for odd in ("0", "x", "99999"):
            assert (await http.get(f"{url}/{odd}", headers=OPS)).status_code == 422
        nobody = await http.get("/api/runs/no-such-run/attachments/1", headers=OPS)
        assert nobody.status_code == 404
        lender = await http.get(f"{url}/1", headers={"Authorization": "Bearer wpt_lend-token"})
        assert lender.status_code == 404  # no role on payer: as if there were no such run
        await sign_in(http, "vic")  # a viewer, by the link the run's page shows
        page = (await http.get(f"/runs/{handle.id}")).text
        assert f'href="{url}/1"' in page and f'href="{url}/2"' in page
        assert (await http.get(f"{url}/2")).content == PDF
        assert await history_length(client, handle.id) == before


async def test_a_turn_mode_runs_tool_steps_show_their_arguments_and_results(
    client: Client, tmp_path: Path, task_queue: str
) -> None:
    """Its reads ran as local activities: no activity event holds their arguments."""
    async with console_over(
        client, tmp_path, task_queue, [reader(tmp_path / "c.db", "turn")]
    ) as http:
        shown, page = await ended_and_read(client, http, "reader", task_queue)
    read = shown["steps"]["t2.tool.3.weather"]
    assert read["arguments"] == '{\n  "city": "CITY2"\n}'
    assert read["result"] == "sunny in CITY2"
    assert shown["timings"]["t2.tool.3.weather"]["ended_at"] is not None
    paid = shown["steps"]["t3.tool.1.pay"]  # an effect runs as a step, whatever the mode
    assert paid["arguments"] == '{\n  "payee": "ada"\n}' and paid["result"] == "paid ada"
    assert '"city": "CITY2"' in page and "sunny in CITY2" in page


async def test_a_web_search_step_shows_its_query_sources_and_citations(
    client: Client, tmp_path: Path, task_queue: str
) -> None:
    searched = reply(
        ServerBlock(type=SEARCH["type"], block=SEARCH),
        ServerBlock(type=RESULTS["type"], block=RESULTS),
        TextBlock(text=CITED["text"], citations=CITED["citations"]),
    )
    agent = build_agent(Payments(tmp_path / "payments.db"), [searched])
    async with console_over(client, tmp_path, task_queue, [agent]) as http:
        shown, page = await ended_and_read(client, http, "payer", task_queue)
    model = shown["steps"]["t1.model"]
    (search,) = model["searches"]
    assert (search["tool"], search["query"]) == ("web_search", "ada lovelace bank details")
    assert search["sources"] == [{"title": "Ada's page", "url": "https://example.org/ada"}]
    (cited,) = model["citations"]
    assert cited["cited_text"] == "Ada keeps her account at the Analytical Bank."
    assert "ada lovelace bank details" in page
    assert '<a href="https://example.org/ada" rel="noopener noreferrer"' in page
    assert "“Ada keeps her account at the Analytical Bank.”" in page


async def test_a_sub_agent_step_links_to_its_child_runs_page(
    client: Client, tmp_path: Path, task_queue: str
) -> None:
    buyer, checker = build_agents(tmp_path / "pay.db")
    async with console_over(client, tmp_path, task_queue, [buyer, checker]) as http:
        handle = await runs.start_run(client, "buyer", "buy from acme", task_queue=task_queue)
        await handle.result()
        await sign_in(http, "vic")
        page = (await http.get(f"/runs/{handle.id}")).text
        child = f"{handle.id}--t1.tool.1.check_supplier"
        link = f'href="/runs/{quote(child)}"'
        assert link in page, page
        child_page = await http.get(f"/runs/{quote(child)}")
    assert child_page.status_code == 200 and "checker" in child_page.text
