"""The console for any person on any screen: a call read as text, a phone, a keyboard, axe-core.

A travel agent's `book` call waits for approval with what the issue found shown raw
(`LHR->JFK`, `corp-amex-jörg`, 1280000 cents): the pages show it labelled and formatted from
the tool's schema, with no escapes. At 390 px every page is one column (nothing wider than the
screen) with targets 44 px tall, and axe-core finds no serious or critical WCAG 2.1 AA
violation on the inbox, the runs list, a run's page or the glossary. A keyboard alone
approves, and the page's figures move on without a reload.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from datetime import date

import pytest
from axe_playwright_python.async_playwright import Axe
from playwright.async_api import Page, expect
from pydantic import BaseModel, Field
from temporalio.testing import WorkflowEnvironment

from tests.conftest import the_pending_approval, wait_for_visibility
from tests.test_browser import require_browser
from tests.test_console_browser import (
    IMAGES,
    PASSWORD,
    WAIT_MS,
    Desk,
    browsing,
    serving,
    sign_in,
    state_is,
)
from waypoint import Agent, ToolContext, tool
from waypoint._console.access import Console
from waypoint._console.people import hash_password, save_entry
from waypoint._console.sessions import Sessions
from waypoint._providers.scripted import ScriptedModel
from waypoint.client import listing, runs
from waypoint.protocol import ModelRequest, ModelResponse
from waypoint.testing import Script, reply, text, tool_use

pytestmark = pytest.mark.xdist_group("console-browser")

AGENT = "travel-desk"
PHONE = {"width": 390, "height": 844}
FLIGHT = {
    "route": "LHR->JFK",
    "card": "corp-amex-jörg",
    "fare_cents": 1280000,
    "currency": "USD",
    "departs": "2026-03-03",
}


class Flight(BaseModel):
    """A flight to book."""

    route: str = Field(description="From and to, as airport codes")
    card: str = Field(title="Card charged", description="The corporate card")
    fare_cents: int = Field(description="The fare, in cents")
    currency: str
    departs: date


def travel_agent(booked: list[str]) -> Agent:
    """Books one flight, after a person approves it."""

    @tool("effect", requires_approval=True, idempotent=True)
    async def book(args: Flight, ctx: ToolContext) -> dict:
        """Book the flight and charge the card."""
        booked.append(ctx.effect_key or "")
        return {"booked": args.route}

    script = [
        reply(text("The fare is in policy; booking it."), tool_use("book", **FLIGHT)),
        reply(text("Booked LHR->JFK for 3 March.")),
    ]
    return Agent(name=AGENT, model="claude-sonnet-4-6", system="You book travel.", tools=[book],
                 script=script)  # fmt: skip


class HeldModel(ScriptedModel):
    """The scripted model; the reply after the booking waits for `last_reply`, so a page
    rendered after the approval sees the run still going."""

    def __init__(self, scripts: dict[str, Script]) -> None:
        super().__init__(scripts)
        self.last_reply = asyncio.Event()

    async def complete(self, request: ModelRequest) -> ModelResponse:
        if request.turn > 1:
            await self.last_reply.wait()
        return await super().complete(request)


@pytest.fixture(scope="module")
async def desk(
    env: WorkflowEnvironment, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Desk]:
    require_browser()
    users = tmp_path_factory.mktemp("console-a11y") / "users.toml"
    save_entry(users, "users", "ann", hash_password(PASSWORD), {AGENT: "operator"})
    task_queue = f"tq-{uuid.uuid4().hex[:8]}"
    console = Console(
        client=env.client, people_file=users, sessions=Sessions("s"), task_queue=task_queue
    )
    agent = travel_agent([])
    scripted = HeldModel({AGENT: agent.script or []})
    async with serving(console, [agent], scripted) as (served, browser):
        yield Desk(env.client, task_queue, served, scripted, {}, browser)


async def waiting_run(desk: Desk) -> str:
    """A run whose `book` call waits for approval, in the inbox."""
    handle = await runs.start_run(desk.client, AGENT, "book my trip", task_queue=desk.task_queue)
    await the_pending_approval(desk.client, handle.id)
    waits = listing.query(agents=[AGENT], waiting=True) + f" AND WorkflowId = '{handle.id}'"
    await wait_for_visibility(desk.client, waits, 1)
    return handle.id


async def test_a_call_reads_as_labelled_text_formatted_from_its_tools_schema(desk: Desk) -> None:
    run = await waiting_run(desk)
    async with browsing(desk, "readable") as page:
        await sign_in(page, desk, "ann", f"/runs/{run}")
        for where in (f"/runs/{run}", "/"):
            await page.goto(desk.url + where)
            call = page.locator('[data-step="t1.tool.1.book"], #approval-t1\\.tool\\.1\\.book')
            fields = call.first.locator(".args > .fields")
            for label, shown in [
                ("Route", "LHR->JFK"),
                ("Card charged", "corp-amex-jörg"),  # the schema's own title
                ("Fare", "12,800.00 USD"),  # cents, by its description; its currency beside
                ("Departs", "3 March 2026"),  # format: date
            ]:
                field = fields.locator(".field", has=page.locator("dt", has_text=label))
                await expect(field.locator("dd")).to_have_text(shown)
            await expect(fields).to_contain_text("From and to, as airport codes")  # the hint
            await expect(call.first.locator(".exact pre")).to_contain_text(
                '"card": "corp-amex-jörg"'
            )
            source = await page.content()
            assert "\\u003e" not in source and "\\u00f6" not in source, where
            assert "LHR-&gt;JFK" in source, where  # escaped for HTML only
        await expect(page.locator("form.who")).to_be_visible()


async def no_wider_than_the_screen(page: Page) -> None:
    """Nothing scrolls sideways, and every control is at least 44 px tall."""
    wide = await page.evaluate("document.documentElement.scrollWidth")
    assert wide <= PHONE["width"], f"{page.url} is {wide} px wide"
    small = await page.evaluate(
        """() => Array.from(document.querySelectorAll(
            "input:not([type=hidden]), select, button, a.button, summary, header.top a"))
          .filter((e) => e.offsetParent !== null)
          .map((e) => [e.outerHTML.slice(0, 80), e.getBoundingClientRect().height])
          .filter(([, h]) => h < 44)"""
    )
    assert not small, f"{page.url}: targets under 44 px: {small}"


async def no_serious_violations(page: Page) -> None:
    """axe-core's WCAG 2.1 A and AA rules: nothing serious or critical."""
    options = {"runOnly": {"type": "tag", "values": ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]}}
    found = await Axe().run(page, options=options)
    bad = [v for v in found.response["violations"] if v["impact"] in ("serious", "critical")]
    assert not bad, f"{page.url}: {found.generate_report()}"


async def test_every_page_fits_a_phone_and_axe_finds_nothing_serious(desk: Desk) -> None:
    run = await waiting_run(desk)
    async with browsing(desk, "phone") as page:
        await sign_in(page, desk, "ann", "/runs")
        for width in (PHONE, {"width": 1280, "height": 900}):
            await page.set_viewport_size(width)  # type: ignore[arg-type]
            for where in ("/", "/runs", f"/runs/{run}", "/glossary", "/runs/no-such-run"):
                await page.goto(desk.url + where)
                await expect(page.locator("main")).to_be_visible()
                if width == PHONE:
                    await no_wider_than_the_screen(page)
                if width == PHONE and where == f"/runs/{run}":
                    IMAGES.mkdir(parents=True, exist_ok=True)
                    await page.screenshot(path=IMAGES / "console-run-phone.png", full_page=True)
                await no_serious_violations(page)


async def test_a_keyboard_alone_approves_and_the_figures_move_without_a_reload(
    desk: Desk,
) -> None:
    run = await waiting_run(desk)
    async with browsing(desk, "keyboard") as page:
        await sign_in(page, desk, "ann", f"/runs/{run}")
        await page.keyboard.press("Tab")
        await expect(page.locator(".skip")).to_be_focused()  # the first stop skips the header
        note = page.get_by_label("Note (optional)")
        for _ in range(40):  # tab through the page as a keyboard user would
            await page.keyboard.press("Tab")
            if await note.evaluate("(e) => e === document.activeElement"):
                break
        await expect(note).to_be_focused()
        await page.keyboard.type("Fare within policy.")
        await page.keyboard.press("Tab")
        approve = page.get_by_role("button", name="Approve")
        await expect(approve).to_be_focused()
        ring = await approve.evaluate("(e) => getComputedStyle(e).outlineStyle")
        assert ring != "none"  # focus is visible
        await page.keyboard.press("Enter")
        await expect(page.get_by_role("status")).to_contain_text("approved", timeout=WAIT_MS)
        tokens = await page.locator("#fig-tokens").inner_text()
        await page.evaluate("window.sameDocument = true")
        assert isinstance(desk.scripted, HeldModel)
        desk.scripted.last_reply.set()
        await state_is(page, "done")
        await expect(page.locator("#live")).to_contain_text("Booked LHR->JFK for 3 March.")
        # The last model step ended after this page was rendered: its tokens came live.
        await expect(page.locator("#fig-tokens")).not_to_have_text(tokens)
        assert await page.evaluate("window.sameDocument === true")
        shown = int(await page.locator("#fig-steps").inner_text())
        shown_tokens = int(await page.locator("#fig-tokens").inner_text())
    result = await runs.handle(desk.client, run).result()
    assert result.output == "Booked LHR->JFK for 3 March."
    assert shown == len(result.ledger) and shown_tokens == result.total_tokens
    (booked,) = [r for r in result.ledger if r.tool == "book"]
    assert booked.status == "completed" and (booked.decided_by or "").startswith("ann via console")
