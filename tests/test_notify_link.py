"""A notice's review link against the real console app and a real run waiting for approval.

Used once, it signs its person in and lands on the run's page; used again, forged, changed or
expired, it is refused with a page that says which (403, never a 500).
"""

from __future__ import annotations

from pathlib import Path

import httpx
from itsdangerous import TimestampSigner, URLSafeTimedSerializer
from temporalio.client import Client

from tests.agents import PAY_SCRIPT, Payments, build_agent
from tests.conftest import running_worker, the_pending_approval
from tests.notify_receivers import notice
from tests.test_console import make_console
from waypoint._console.app import build_app
from waypoint._notify.links import LINK_SECONDS, SALT, review_link
from waypoint.client import runs

SECRET = "test-secret"  # make_console's


async def test_a_review_link_signs_its_person_in_once_and_opens_the_run(
    client: Client, tmp_path: Path, task_queue: str
) -> None:
    console = make_console(client, tmp_path, task_queue)
    agent = build_agent(Payments(tmp_path / "payments.db"), PAY_SCRIPT, approval=True)
    transport = httpx.ASGITransport(app=build_app(console))
    async with running_worker(client, [agent], task_queue):
        handle = await runs.start_run(client, "payer", "pay ada 5", task_queue=task_queue)
        pending = await the_pending_approval(client, handle.id)
        about = notice(run=handle.id, step_id=pending.step_id)
        link = review_link("http://console", SECRET, about, "ann")
        path = link.removeprefix("http://console")
        async with httpx.AsyncClient(transport=transport, base_url="http://console") as browser:
            landed = await browser.get(path)
            assert landed.status_code == 303 and landed.headers["location"] == f"/runs/{handle.id}"
            page = await browser.get(landed.headers["location"])
            assert page.status_code == 200 and pending.step_id in page.text
            assert "ann" in page.text and 'name="csrf"' in page.text  # signed in: may decide
        async with httpx.AsyncClient(transport=transport, base_url="http://console") as other:
            again = await other.get(path)
            assert again.status_code == 403 and "used already" in again.text
            assert "waypoint_session" not in again.cookies
            shared = review_link("http://console", SECRET, about, None)  # a channel's, not ann's
            opened = await other.get(shared.removeprefix("http://console"))
            assert opened.headers["location"] == f"/runs/{handle.id}"
            assert (await other.get(opened.headers["location"])).status_code == 303  # sign in


async def test_a_forged_changed_or_expired_link_is_refused(
    client: Client, tmp_path: Path, task_queue: str
) -> None:
    console = make_console(client, tmp_path, task_queue)
    transport = httpx.ASGITransport(app=build_app(console))
    about = notice()

    class Old(TimestampSigner):
        def get_timestamp(self) -> int:
            return super().get_timestamp() - LINK_SECONDS - 60

    claim = {"r": "run-1", "s": "t1", "p": "ann", "n": "ab"}
    stale = URLSafeTimedSerializer(SECRET, salt=SALT, signer=Old).dumps(claim)
    forged = review_link("http://console", "another-secret", about, "ann").rsplit("/", 1)[1]
    good = review_link("http://console", SECRET, about, "ann").rsplit("/", 1)[1]
    cases = {
        stale: "has expired",
        forged: "is not valid",
        good[:-3] + "AAA": "is not valid",
        "x" * 5000: "is not valid",
    }
    async with httpx.AsyncClient(transport=transport, base_url="http://console") as browser:
        for token, why in cases.items():
            answer = await browser.get(f"/r/{token}")
            assert answer.status_code == 403 and why in answer.text, (token, answer.text)
        gone = review_link("http://console", SECRET, about, "nobody")
        refused = await browser.get(gone.removeprefix("http://console"))
        assert refused.status_code == 403 and "no longer knows" in refused.text
