"""The Temporal Web UI, opened in headless Chromium, shows a run's pending approval."""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.contrib.pydantic import pydantic_data_converter

from tests.agents import PAY_SCRIPT, Payments, build_agent
from tests.conftest import running_worker, wait_for_state
from waypoint import runs
from waypoint.server import free_port, start_dev_server
from waypoint.worker import connect

CHROMIUM = Path("/usr/bin/chromium")
SCREENSHOT = Path(__file__).parents[1] / "test-artifacts" / "web-ui-awaiting-approval.png"
# Without the background-networking flags Chromium keeps dialling Google on a closed network.
CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
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


async def capture_run_page(url: str, expected: list[str], profile: Path) -> str:
    """Open `url`, wait until the page shows every `expected` text, screenshot it; the page text."""
    from playwright.async_api import async_playwright

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
            await page.goto(url, timeout=PAGE_TIMEOUT_MS)
            # The UI fetches current details with a query the worker answers, after first paint.
            await page.wait_for_function(
                "(texts) => texts.every((t) => document.body.innerText.includes(t))",
                arg=expected,
                timeout=PAGE_TIMEOUT_MS,
            )
            await page.get_by_text("Awaiting approval").first.scroll_into_view_if_needed()
            SCREENSHOT.parent.mkdir(exist_ok=True)
            await page.screenshot(path=SCREENSHOT, full_page=True)
            return await page.inner_text("body")
        finally:
            await context.close()


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
            page_text = await capture_run_page(
                f"{server.ui_url}/namespaces/default/workflows/{handle.id}",
                ["Awaiting approval", command],
                tmp_path / "chromium-profile",
            )
            assert handle.id in page_text
            assert payments.count() == 0
            await runs.decide(
                client, handle.id, "t2.tool.1.pay", approve=True, reviewer="browser-test"
            )
            result = await handle.result()
    assert result.output == "Paid ada 5."
    assert payments.count() == 1
    assert SCREENSHOT.stat().st_size > 10_000
