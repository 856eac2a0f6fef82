"""Two people's journeys in headless Chromium: an approver answers a question from the form its
answer schema makes; an operator cancels a run, confirming it with a reason, and the stopped
run says who, when and why, with the call it waited on shown as not run.

A real console (uvicorn on a free port), a real dev server and worker; outcomes are asserted on
the run's own record (its result, ledger and history) and the downstream's payment count.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from dataclasses import dataclass

import pytest
from playwright.async_api import Browser, Page, expect
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from tests.agents import PAY_SCRIPT, Payments, build_agent
from tests.client_tool_app import asker
from tests.conftest import running_worker, the_pending_approval, wait_for_state
from tests.test_browser import ARTIFACTS
from tests.test_console_browser import PASSWORD, VIEWPORT, WAIT_MS, console_and_browser, people
from waypoint._console.access import Console
from waypoint._console.serve import RunningConsole
from waypoint._console.sessions import Sessions
from waypoint.client import runs

pytestmark = pytest.mark.xdist_group("console-actions-browser")


@dataclass
class Desk:
    client: Client
    task_queue: str
    console: RunningConsole
    payments: Payments
    browser: Browser


@pytest.fixture(scope="module")
async def desk(
    env: WorkflowEnvironment, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Desk]:
    tmp = tmp_path_factory.mktemp("console-actions")
    payments = Payments(tmp / "payments.db")
    agents = [asker(tmp / "notes.db"), build_agent(payments, PAY_SCRIPT, approval=True)]
    task_queue = f"tq-{uuid.uuid4().hex[:8]}"
    users = people(tmp, ann={"asker": "approver"}, ops={"payer": "operator"})
    console = Console(
        client=env.client, people_file=users, sessions=Sessions("s"), task_queue=task_queue
    )
    async with AsyncExitStack() as stack:
        served, browser = await console_and_browser(stack, console)
        await stack.enter_async_context(running_worker(env.client, agents, task_queue))
        yield Desk(env.client, task_queue, served, payments, browser)


async def signed_in(desk: Desk, user: str, target: str) -> Page:
    context = await desk.browser.new_context(viewport=VIEWPORT)
    page = await context.new_page()
    page.set_default_timeout(WAIT_MS)
    await page.goto(desk.console.url() + target)
    await page.get_by_label("Name").fill(user)
    await page.get_by_label("Password").fill(PASSWORD)
    await page.get_by_role("button", name="Sign in").click()
    await expect(page).to_have_url(desk.console.url() + target)
    return page


async def test_an_approver_answers_a_question_from_its_generated_form(desk: Desk) -> None:
    handle = await runs.start_run(desk.client, "asker", "Pick one.", task_queue=desk.task_queue)
    try:
        (question,) = (
            await wait_for_state(desk.client, handle.id, "awaiting_answer")
        ).pending_questions
        page = await signed_in(desk, "ann", f"/runs/{handle.id}")
        await page.get_by_label("Choice").select_option("blue")
        await page.get_by_label("Note").fill("like the sky")
        await page.get_by_role("button", name="Answer").click()
        await expect(page.get_by_role("status")).to_have_text("answered by you")
        result = await handle.result()
        await page.context.close()
    finally:
        with contextlib.suppress(Exception):
            await handle.terminate("test done")
    assert "blue" in result.output and "like the sky" in result.output
    (step,) = [r for r in result.ledger if r.step_id == question.step_id]
    assert step.decided_by and step.decided_by.startswith("ann via console")


async def test_an_operator_cancels_with_a_confirmation_and_a_reason_and_the_run_says_so(
    desk: Desk,
) -> None:
    handle = await runs.start_run(desk.client, "payer", "Pay ada 5.", task_queue=desk.task_queue)
    try:
        pending = await the_pending_approval(desk.client, handle.id)
        page = await signed_in(desk, "ops", f"/runs/{handle.id}")
        await page.get_by_role("button", name="Cancel run…").click()
        await expect(page.get_by_role("heading", level=1)).to_have_text(f"Cancel run {handle.id}?")
        assert (await runs.status(desk.client, handle.id)).state == "awaiting_approval"
        await page.get_by_label("Why (recorded with the run)").fill("fraud suspected")
        await page.get_by_role("button", name="Yes, cancel the run").click()
        await expect(page.get_by_role("status")).to_have_text("cancel requested by you")
        stopped = page.locator("#stopped")
        for _ in range(50):  # the cancel is recorded at once; the run closes a moment later
            if "Cancelled by" in (await stopped.inner_text()):
                break
            await page.reload()
        await expect(stopped).to_contain_text("Cancelled by ops via console")
        await expect(stopped).to_contain_text("fraud suspected")
        row = page.locator(f"#step-{pending.step_id}".replace(".", r"\."))
        await expect(row.locator(".status")).to_have_text("not run")
        await expect(page.locator("#live")).to_contain_text("Checking.")  # Claude's words kept
        ARTIFACTS.mkdir(exist_ok=True)
        await page.screenshot(path=ARTIFACTS / "console-run-cancelled.png", full_page=True)
        await page.context.close()
    finally:
        with contextlib.suppress(Exception):
            await handle.terminate("test done")
    asked = [
        e.workflow_execution_cancel_requested_event_attributes.cause
        async for e in handle.fetch_history_events()
        if e.HasField("workflow_execution_cancel_requested_event_attributes")
    ]
    assert asked == ["cancelled by ops via console: fraud suspected"]
    assert desk.payments.count() == 0
