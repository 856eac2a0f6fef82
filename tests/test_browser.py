"""The Temporal Web UI, opened in headless Chromium, shows a run's pending approval."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from temporalio.contrib.pydantic import pydantic_data_converter

from tests.agents import PAY_SCRIPT, Payments, build_agent
from tests.conftest import running_worker, wait_for_state
from waypoint._operations.dev_server import free_port, start_dev_server
from waypoint.client import runs
from waypoint.settings import connect

if TYPE_CHECKING:
    from playwright.async_api import Page

CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = Path(__file__).parents[1] / "test-artifacts"
SCREENSHOT = ARTIFACTS / "web-ui-awaiting-approval.png"
FAILURE_SCREENSHOT = ARTIFACTS / "web-ui-awaiting-approval-failed.png"
# Without the background-networking flags Chromium keeps dialling Google on a closed network.
CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    # Containers often have a small /dev/shm, and Debian's launcher does not always notice.
    "--disable-dev-shm-usage",
]
PAGE_TIMEOUT_MS = 30_000


def require_browser() -> None:
    """Skip, naming the missing piece, unless Chromium and the playwright driver are installed."""
    if not CHROMIUM.is_file():
        pytest.skip(f"Chromium is not installed at {CHROMIUM}: run scripts/install-browser.sh")
    pytest.importorskip(
        "playwright.async_api",
        reason="the playwright package is not installed: pip install -e '.[dev]'",
    )


async def capture_current_details(url: str, expected: list[str], profile: Path) -> str:
    """Open the run at `url` in headless Chromium and screenshot its pending approval.

    Returns:
        The text of the run's current details as the page renders them.
    """
    from playwright.async_api import async_playwright

    ARTIFACTS.mkdir(exist_ok=True)
    async with async_playwright() as playwright:
        context = await playwright.chromium.launch_persistent_context(
            profile,
            executable_path=CHROMIUM,
            headless=True,
            args=CHROMIUM_FLAGS,
            viewport={"width": 1400, "height": 1000},
        )
        try:
            page = await context.new_page()
            page.set_default_timeout(PAGE_TIMEOUT_MS)
            try:
                details = await show_current_details(page, url, expected)
            except Exception:
                # What the page showed instead is the quickest clue when the UI changes.
                await page.screenshot(path=FAILURE_SCREENSHOT, full_page=True)
                raise
            await page.screenshot(path=SCREENSHOT, full_page=True)
            return details
        finally:
            await context.close()


async def show_current_details(page: Page, url: str, expected: list[str]) -> str:
    """Go to the run's User Metadata tab and wait until its current details show `expected`."""
    from playwright.async_api import expect

    await page.goto(url)
    await page.get_by_role("tab", name="User Metadata").click()
    await expect(page.get_by_text("Current Details", exact=True)).to_be_visible(
        timeout=PAGE_TIMEOUT_MS
    )
    # The UI renders the markdown in an iframe, from a query that the worker answers.
    details = page.frame_locator("iframe#user-metadata-current-details").locator("body")
    for text in expected:
        await expect(details).to_contain_text(text, timeout=PAGE_TIMEOUT_MS)
    return await details.inner_text()


async def test_web_ui_shows_pending_approval_in_current_details(
    task_queue: str, tmp_path: Path
) -> None:
    require_browser()
    payments = Payments(tmp_path / "payments.db")
    agent = build_agent(payments, PAY_SCRIPT, approval=True)
    with start_dev_server(tmp_path / "state", port=free_port(), ui_port=free_port()) as server:
        client = await connect({"target_host": server.address}, pydantic_data_converter)
        async with running_worker(client, [agent], task_queue):
            handle = await runs.start_run(client, "payer", "pay ada 5", task_queue=task_queue)
            await wait_for_state(client, handle.id, "awaiting_approval")
            command = f"waypoint approve {handle.id} t2.tool.1.pay"
            details = await capture_current_details(
                f"{server.ui_url}/namespaces/default/workflows/{handle.id}",
                ["Awaiting approval", command],
                tmp_path / "chromium-profile",
            )
            assert "awaiting_approval" in details
            assert payments.count() == 0
            await runs.approve(client, handle.id, "t2.tool.1.pay", reviewer="browser-test")
            result = await handle.result()
    assert result.output == "Paid ada 5."
    assert payments.count() == 1
    assert SCREENSHOT.stat().st_size > 10_000
