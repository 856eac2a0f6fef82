"""The console in headless Chromium: sign in, approve from the inbox, watch the run end live.

A real console (uvicorn on a free port), a real dev server and worker, a real SQLite downstream
that counts payments. One browser, one console and one worker serve the module; each test signs
in on a browser context of its own and drives an agent of its own, so no two share runs or
payments. The first test saves the inbox and a run's page (to `docs/images/` for docs/console.md
when WAYPOINT_README_SCREENSHOTS=1).
"""

from __future__ import annotations

import asyncio
import contextlib
import html
import os
import re
import uuid
from collections.abc import AsyncIterator, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from playwright.async_api import Browser, Page, ViewportSize, async_playwright, expect
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.testing import WorkflowEnvironment

from tests.agents import PAY_SCRIPT, Payments, build_agent
from tests.conftest import running_worker, the_pending_approval, wait_for_visibility
from tests.steer_app import texts
from tests.test_browser import ARTIFACTS, CHROMIUM, CHROMIUM_FLAGS, require_browser
from tests.test_rich_content import PDF
from waypoint import Agent, document
from waypoint._console.access import Console
from waypoint._console.people import Role, hash_password, save_entry
from waypoint._console.serve import RunningConsole, start_console
from waypoint._console.sessions import Sessions
from waypoint._providers.scripted import ScriptedModel
from waypoint._readable import REFUSED
from waypoint.client import listing, runs
from waypoint.protocol import ModelRequest, ModelResponse, text_of
from waypoint.protocol.events import delta_stream_id
from waypoint.protocol.states import STATES
from waypoint.testing import Script, last_tool_results, reply, text, tool_use

pytestmark = pytest.mark.xdist_group("console-browser")

IMAGES = (
    Path(__file__).parents[1] / "docs" / "images"
    if os.environ.get("WAYPOINT_README_SCREENSHOTS") == "1"
    else Path(__file__).parents[1] / "test-artifacts"
)
"""docs/console.md's screenshots are taken again with WAYPOINT_README_SCREENSHOTS=1; otherwise the
pictures go to test-artifacts/, so a test run leaves the tracked ones alone."""
VIEWPORT: ViewportSize = {"width": 1280, "height": 900}
WAIT_MS = 30_000
"""For anything that waits on the run: a busy 2-core machine takes its time."""
PASSWORD = "correct horse battery"

PAYABLES = "accounts-payable"
VIEWED = "vendor-payouts"
REFUNDS = "vendor-refunds"
STEERED = "expenses"
WRITER = "vendor-briefs"
DRAFT = "Drafting the brief on Northwind Traders: three years of invoices, all paid on time, "
"""The words a slow model step says before it is held (`HeldModel.draft_held`)."""
INVOICES = {
    "INV-2291": ("Northwind Traders", "PO-7781", 1500, 340),
    "INV-2294": ("Acme Cloud Hosting", "PO-7790", 380, 40),
    "INV-2302": ("Blue Harbor Logistics", "PO-7802", 6900, 415),
}
"""Invoice: payee, purchase order, and its two lines (the amount paid is their sum)."""


def scanned(number: str) -> bytes:
    """The invoice's scan, as a PDF a run is started with."""
    return PDF.replace(b"endobj", f"endobj % {number}".encode())


def invoice(request: ModelRequest) -> tuple[str, str, str, int, int]:
    """The invoice the run's task names, and what the scripted model makes of it."""
    (number,) = re.findall(r"INV-\d+", texts(request)[0])
    return (number, *INVOICES[number])


def check_lines(request: ModelRequest) -> ModelResponse:
    number, payee, order, first, second = invoice(request)
    said = f"{number} from {payee} has two lines on {order}; adding them up first."
    return reply(text(said), tool_use("add", a=first, b=second))


def pay_invoice(request: ModelRequest) -> ModelResponse:
    number, payee, _, first, second = invoice(request)
    said = f"The lines add up to {first + second} EUR, the invoice's total. Paying {payee}."
    return reply(text(said), tool_use("pay", payee=payee, amount=first + second))


def report_paid(request: ModelRequest) -> ModelResponse:
    number, payee, order, first, second = invoice(request)
    return reply(
        text(f"Paid {payee} {first + second} EUR for {number} ({order}); the payment is booked.")
    )


def ask_again(request: ModelRequest) -> ModelResponse:
    """After a person rejected the refund: the same payee, other arguments."""
    (rejected,) = last_tool_results(request)
    assert rejected.is_error, rejected
    return reply(
        text("Asking again for the full amount."), tool_use("pay", payee="Globex", amount=1200)
    )


SCRIPTS: dict[str, Script] = {
    PAYABLES: [check_lines, pay_invoice, report_paid],
    VIEWED: PAY_SCRIPT,
    REFUNDS: [
        reply(
            text("Refunding Globex's duplicate charge."),
            tool_use("pay", payee="Globex", amount=120),
        ),
        ask_again,
        reply(text("Refunded Globex.")),
    ],
    STEERED: PAY_SCRIPT,
    WRITER: [reply(text(DRAFT + "no open disputes."))],
}


class HeldModel(ScriptedModel):
    """The scripted model; an invoice's replies take a moment, like Claude's, and its last one
    waits for `last_reply`, so a page loaded after the approval sees the run still running.
    A brief's step says its words, then waits for `draft_held` before it answers."""

    def __init__(self, scripts: Mapping[str, Script]) -> None:
        latency = {PAYABLES: 0.4, WRITER: 0.5}
        super().__init__(dict(scripts), latency_of=lambda r: latency.get(r.agent, 0))
        self.last_reply = asyncio.Event()
        self.draft_held = asyncio.Event()

    async def _write(self, read: int, response: ModelResponse, latency: float) -> None:
        await super()._write(read, response, latency)
        if text_of(response.content).startswith(DRAFT):
            await self.draft_held.wait()

    async def complete(self, request: ModelRequest) -> ModelResponse:
        if request.agent == PAYABLES and request.turn == 3:
            await self.last_reply.wait()
        return await super().complete(request)


@dataclass
class Desk:
    """What the module's tests share: a console, its worker, one browser."""

    client: Client
    task_queue: str
    console: RunningConsole
    scripted: HeldModel
    payments: Mapping[str, Payments]
    browser: Browser

    @property
    def url(self) -> str:
        return self.console.url()


@pytest.fixture(scope="module")
async def desk(
    env: WorkflowEnvironment, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Desk]:
    require_browser()
    tmp = tmp_path_factory.mktemp("console-browser")
    users = people(
        tmp, ann=dict.fromkeys(SCRIPTS, "approver"), vic=dict.fromkeys(SCRIPTS, "viewer")
    )
    task_queue = f"tq-{uuid.uuid4().hex[:8]}"
    console = Console(
        client=env.client,
        people_file=users,
        sessions=Sessions("browser-secret"),
        task_queue=task_queue,
    )
    payments = {name: Payments(tmp / f"{name}.db") for name in SCRIPTS}
    agents = [build_agent(payments[n], s, name=n, approval=True) for n, s in SCRIPTS.items()]
    scripted = HeldModel(SCRIPTS)
    async with serving(console, agents, scripted) as (served, browser):
        yield Desk(env.client, task_queue, served, scripted, payments, browser)


@asynccontextmanager
async def serving(
    console: Console, agents: list[Agent], scripted: ScriptedModel
) -> AsyncIterator[tuple[RunningConsole, Browser]]:
    """A worker for `agents` on the console's queue, the console on a free port, a browser."""
    async with AsyncExitStack() as stack:
        await stack.enter_async_context(
            running_worker(console.client, agents, console.task_queue, scripted=scripted)
        )
        yield await console_and_browser(stack, console)


def people(tmp: Path, **roles: dict[str, Role]) -> Path:
    """A users file in `tmp`: each person, with `PASSWORD` and their roles by agent."""
    users = tmp / "users.toml"
    for name, theirs in roles.items():
        save_entry(users, "users", name, hash_password(PASSWORD), theirs)
    return users


async def console_and_browser(
    stack: AsyncExitStack, console: Console
) -> tuple[RunningConsole, Browser]:
    """The console served on a free port and a headless Chromium, both closed with `stack`."""
    require_browser()
    served = await start_console(console, port=0)
    stack.push_async_callback(served.stop)
    playwright = await stack.enter_async_context(async_playwright())
    browser = await playwright.chromium.launch(
        executable_path=CHROMIUM, headless=True, args=CHROMIUM_FLAGS
    )
    stack.push_async_callback(browser.close)
    return served, browser


@asynccontextmanager
async def browsing(desk: Desk, name: str) -> AsyncIterator[Page]:
    """A fresh browser context (no cookies) and its page; what it showed is kept on failure."""
    context = await desk.browser.new_context(viewport=VIEWPORT)
    page = await context.new_page()
    page.set_default_timeout(WAIT_MS)
    try:
        yield page
    except BaseException:
        ARTIFACTS.mkdir(exist_ok=True)
        with contextlib.suppress(Exception):
            await page.screenshot(path=ARTIFACTS / f"console-{name}-failed.png", full_page=True)
        raise
    finally:
        await context.close()


async def sign_in(page: Page, desk: Desk, user: str, target: str = "/") -> None:
    """Open `target`, get sent to the sign-in form, sign in there, land on `target`."""
    await page.goto(desk.url + target)
    await expect(page).to_have_url(re.compile(r"/signin\?next="))
    await page.get_by_label("Name").fill(user)
    await page.get_by_label("Password").fill(PASSWORD)
    await page.get_by_role("button", name="Sign in").click()
    await expect(page).to_have_url(desk.url + target, timeout=WAIT_MS)
    await expect(page.locator("form.who")).to_contain_text(user)


async def state_is(page: Page, state: str) -> None:
    """The run page shows `state` (its name kept in `data-state`) in words."""
    await expect(page.locator("#state")).to_have_attribute("data-state", state, timeout=WAIT_MS)
    await expect(page.locator("#state")).to_have_text(STATES[state].label)


async def test_approver_approves_from_the_inbox_and_watches_the_run_end_live(desk: Desk) -> None:
    started = []
    try:
        for number, (payee, order, *_) in INVOICES.items():
            run = f"pay-{number.lower()}"
            task = f"Pay invoice {number} from {payee} against {order}."
            scan = [document(scanned(number), title=f"{number}.pdf")]
            started.append(
                await runs.start_run(
                    desk.client, PAYABLES, task, task_queue=desk.task_queue, workflow_id=run,
                    attachments=scan,
                )
            )  # fmt: skip
        for handle in started:
            await the_pending_approval(desk.client, handle.id)
        await wait_for_visibility(desk.client, listing.query(agents=[PAYABLES], waiting=True), 3)
        run = started[0].id
        async with browsing(desk, "inbox") as page:
            await sign_in(page, desk, "ann")
            cards = page.locator("article.approval")
            await expect(cards).to_have_count(3)
            card = cards.filter(has=page.locator(f'a[href="/runs/{run}"]'))
            await expect(card).to_contain_text('"payee": "Northwind Traders"')
            await expect(card).to_contain_text('"amount": 1840')  # the exact JSON, folded
            await expect(card.locator(".field", has_text="Payee")).to_contain_text(
                "Northwind Traders"
            )
            IMAGES.mkdir(parents=True, exist_ok=True)
            await page.screenshot(path=IMAGES / "console-inbox.png", full_page=True)

            await card.get_by_role("link", name="Review").click()
            await expect(page).to_have_url(re.compile(rf"/runs/{run}#approval-t2\.tool\.1\.pay$"))
            await state_is(page, "awaiting_approval")
            live = page.locator("#live")  # what Claude said so far, replayed from the stream
            await expect(live).to_contain_text("adding them up first", timeout=WAIT_MS)
            await expect(live).to_contain_text("Paying Northwind Traders.")
            await page.screenshot(path=IMAGES / "console-run.png", full_page=True)
            attached = page.get_by_role("link", name=re.compile("INV-2291.pdf"))
            opened = await page.request.get(desk.url + await attached.get_attribute("href"))
            assert opened.ok and await opened.body() == scanned("INV-2291")
            assert desk.payments[PAYABLES].count() == 0

            await page.get_by_placeholder("note (optional)").fill(
                "Matches PO-7781 and the receipt."
            )
            await page.get_by_role("button", name="Approve").click()
            said = page.get_by_role("status")
            await expect(said).to_have_text("approved t2.tool.1.pay", timeout=WAIT_MS)
            # Rendered while the last reply is held back: `done` can only come live.
            assert await live.get_attribute("data-ended") == "0"
            await expect(page.locator("#state")).not_to_have_attribute("data-state", "done")
            await page.evaluate("window.sameDocument = true")
            desk.scripted.last_reply.set()
            await state_is(page, "done")
            await expect(page.locator("#state")).to_have_class("state done")
            await expect(live).to_contain_text("Paid Northwind Traders 1840 EUR for INV-2291")
            assert await page.evaluate("window.sameDocument === true")  # no reload, no navigation

            result = await started[0].result()
            assert (
                result.output
                == "Paid Northwind Traders 1840 EUR for INV-2291 (PO-7781); the payment is booked."
            )
            (paid,) = [r for r in result.ledger if r.step_id == "t2.tool.1.pay"]
            assert paid.status == "completed" and paid.decided_by
            assert paid.decided_by.startswith("ann via console")
            assert desk.payments[PAYABLES].count() == 1

            await page.goto(f"{desk.url}/runs/{run}")  # the finished page, whole, for the docs
            await state_is(page, "done")
            await expect(page.locator(".ledger")).to_contain_text("ann via console")
            await page.screenshot(path=IMAGES / "console-run-done.png", full_page=True)
    finally:
        desk.scripted.last_reply.set()
        for handle in started:
            with contextlib.suppress(Exception):
                await handle.terminate("test done")
    assert desk.payments[PAYABLES].count() == 1  # and none for the two nobody approved


async def test_a_page_opened_mid_step_shows_the_words_so_far_and_its_stream_ends_with_the_step(
    desk: Desk,
) -> None:
    """The step has said its words and is still running when the page opens: they show at
    once, not when the step ends. The reader leaves mid-step; the step's live stream ends when
    the step does, not at its 2-hour lifetime."""
    handle = await runs.start_run(desk.client, WRITER, "brief me", task_queue=desk.task_queue)
    stream = desk.client.get_workflow_handle(delta_stream_id(handle.id, "t1.model"))
    try:
        async with browsing(desk, "mid-step") as page:
            await sign_in(page, desk, "vic", f"/runs/{handle.id}")
            await expect(page.locator("#live")).to_contain_text(DRAFT.strip(), timeout=WAIT_MS)
            assert not desk.scripted.draft_held.is_set()  # the step has not answered
            assert await page.locator("#live").get_attribute("data-ended") == "0"
            assert (await stream.describe()).status == WorkflowExecutionStatus.RUNNING
        desk.scripted.draft_held.set()  # the page is gone; the step answers
        result = await handle.result()
        assert result.output == DRAFT + "no open disputes."
        async with asyncio.timeout(WAIT_MS / 1000):
            while (await stream.describe()).status == WorkflowExecutionStatus.RUNNING:
                await asyncio.sleep(0.1)
        assert (await stream.describe()).status == WorkflowExecutionStatus.COMPLETED
    finally:
        desk.scripted.draft_held.set()
        with contextlib.suppress(Exception):
            await handle.terminate("test done")


async def test_a_viewer_sees_the_run_but_cannot_approve_it_even_by_a_forged_post(
    desk: Desk,
) -> None:
    handle = await runs.start_run(desk.client, VIEWED, "pay ada 5", task_queue=desk.task_queue)
    try:
        pending = await the_pending_approval(desk.client, handle.id)
        async with browsing(desk, "viewer") as page:
            await sign_in(page, desk, "vic", f"/runs/{handle.id}")
            await state_is(page, "awaiting_approval")
            await expect(page.locator(".approval .args")).to_contain_text('"payee": "ada"')
            await expect(page.get_by_text("approving needs the approver role")).to_be_visible()
            await expect(page.get_by_role("button", name="Approve")).to_have_count(0)
            await expect(page.get_by_role("button", name="Reject")).to_have_count(0)
            await expect(page.get_by_role("button", name="Steer")).to_have_count(0)

            csrf = await page.locator('form.who input[name="csrf"]').input_value()
            assert csrf
            form = {
                "csrf": csrf,
                "step_id": pending.step_id,
                "arguments_hash": pending.arguments_hash,
            }
            forged = await page.request.post(f"{desk.url}/runs/{handle.id}/approve", form=form)
            assert forged.status == 403
            assert "vic is viewer for agent 'vendor-payouts'" in html.unescape(await forged.text())
            api = await page.evaluate(
                """async ([run, body, csrf]) => {
                    const r = await fetch(`/api/runs/${run}/approve`, {
                        method: "POST",
                        headers: {"Content-Type": "application/json", "X-CSRF-Token": csrf},
                        body: JSON.stringify(body),
                    });
                    const type = r.headers.get("content-type");
                    return {status: r.status, type, body: await r.json()};
                }""",
                [handle.id, {k: form[k] for k in ("step_id", "arguments_hash")}, csrf],
            )
            assert api["status"] == 403 and api["type"] == "application/problem+json"
            assert "vic is viewer" in api["body"]["detail"]
        status = await runs.status(desk.client, handle.id)
        assert status.state == "awaiting_approval"
        assert [p.step_id for p in status.pending_approvals] == [pending.step_id]
        assert desk.payments[VIEWED].count() == 0
    finally:
        await handle.terminate("test done")


async def test_an_out_of_date_page_cannot_approve_arguments_nobody_reviewed(desk: Desk) -> None:
    handle = await runs.start_run(
        desk.client, REFUNDS, "refund Globex's duplicate charge", task_queue=desk.task_queue
    )
    try:
        first = await the_pending_approval(desk.client, handle.id)
        assert first.arguments == {"payee": "Globex", "amount": 120}
        async with browsing(desk, "stale") as page:
            await sign_in(page, desk, "ann", f"/runs/{handle.id}")
            await expect(page.locator(".approval .args")).to_contain_text('"amount": 120')
            await expect(page.locator("#stale")).to_be_hidden()

            # Someone else rejects it; the model asks again, for another amount.
            await runs.reject(
                desk.client,
                handle.id,
                first.step_id,
                reviewer="bob",
                reason="the duplicate was 1200, not 120",
            )
            again = await the_pending_approval(desk.client, handle.id)
            assert again.arguments == {"payee": "Globex", "amount": 1200}
            await expect(page.locator("#stale")).to_be_visible(timeout=WAIT_MS)

            await page.get_by_role("button", name="Approve").click()  # the old page's form
            await expect(page.locator(".problem")).to_have_attribute("data-status", "409")
            await expect(page.locator("h1")).to_have_text(REFUSED[409])
            await expect(page.locator(".problem")).to_contain_text(
                f"step '{first.step_id}' of run '{handle.id}' is not awaiting approval"
            )
            await page.get_by_role("link", name=f"Back to {handle.id}").click()
            await expect(page.locator(".approval .args")).to_contain_text('"amount": 1200')
            await expect(
                page.locator(f"#approval-{again.step_id}".replace(".", r"\."))
            ).to_be_visible()
        status = await runs.status(desk.client, handle.id)
        assert [p.step_id for p in status.pending_approvals] == [again.step_id]  # undecided
        assert desk.payments[REFUNDS].count() == 0
    finally:
        await handle.terminate("test done")


async def test_a_steer_typed_on_the_run_page_reaches_the_model_naming_who_sent_it(
    desk: Desk,
) -> None:
    handle = await runs.start_run(desk.client, STEERED, "pay ada 5", task_queue=desk.task_queue)
    words = "Pay ada from the EUR account; she invoiced in euros."
    try:
        await the_pending_approval(desk.client, handle.id)
        async with browsing(desk, "steer") as page:
            await sign_in(page, desk, "ann", f"/runs/{handle.id}")
            await page.get_by_placeholder("Steer: a message").fill(words)
            await page.get_by_role("button", name="Steer").click()
            await expect(page.get_by_role("status")).to_have_text(
                "steer sent: the model reads it at its next safe point", timeout=WAIT_MS
            )
            await page.get_by_role("button", name="Approve").click()
            await expect(page.get_by_role("status")).to_contain_text("approved", timeout=WAIT_MS)
            await state_is(page, "done")
        result = await handle.result()
    finally:
        with contextlib.suppress(Exception):
            await handle.terminate("test done")
    heard = [
        r
        for r in desk.scripted.requests
        if r.agent == STEERED and any(words in t for t in texts(r))
    ]
    assert heard, "the model never read the steer"
    assert f"Message from ann via console, who is steering this run: {words}" in texts(heard[0])
    (steer,) = [r for r in result.ledger if r.kind == "operator" and r.tool == "steer"]
    assert steer.decided_by and steer.decided_by.startswith("ann via console")
    assert desk.payments[STEERED].count() == 1


async def test_nobody_signed_in_is_sent_to_sign_in_and_the_api_answers_401(desk: Desk) -> None:
    async with browsing(desk, "anonymous") as page:
        await page.goto(desk.url + "/runs")
        await expect(page).to_have_url(f"{desk.url}/signin?next=/runs")
        await expect(page.get_by_role("button", name="Sign in")).to_be_visible()
        answer = await page.request.get(desk.url + "/api/runs")
        assert answer.status == 401
        assert answer.headers["content-type"] == "application/problem+json"
        problem = await answer.json()
        assert problem["status"] == 401 and "sign in" in problem["detail"]


async def test_a_sign_out_holds_for_a_copied_cookie_and_a_non_ascii_token_is_a_403(
    desk: Desk,
) -> None:
    async with browsing(desk, "signout") as page:
        await sign_in(page, desk, "vic", "/runs")
        copied = await page.context.cookies()
        assert [c["name"] for c in copied if c["name"].endswith("waypoint_session")]
        odd = await page.request.post(
            f"{desk.url}/runs/r/steer", form={"csrf": "é", "message": "x"}
        )
        assert odd.status == 403  # the review's 500: a token that is not ASCII
        await page.get_by_role("button", name="Sign out").click()
        await expect(page).to_have_url(re.compile(r"/signin"))
    async with browsing(desk, "replayed") as page:
        await page.context.add_cookies(copied)  # the cookie as it was before signing out
        await page.goto(desk.url + "/runs")
        await expect(page).to_have_url(f"{desk.url}/signin?next=/runs")
        answer = await page.request.get(desk.url + "/api/me")
        assert answer.status == 401
