"""A webhook receiver that is down while a run waits, is approved in the console, and goes on.

Everything is real: the worker's `waypoint.notify` activities read a notifications file, the
console serves HTTP on loopback, and the receiver is a socket that is not listening at first.
"""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from pathlib import Path

import httpx
from temporalio.client import Client

from tests.agents import PAY_SCRIPT, Payments, build_agent
from tests.conftest import running_worker, the_pending_approval, wait_until
from tests.notify_receivers import Receiver
from tests.test_console import make_console
from tests.test_notices import notice_lines
from waypoint._console.serve import start_console
from waypoint._notify.config import load_notify
from waypoint._operations.processes import free_port
from waypoint.client import runs
from waypoint.client.detail import run_detail
from waypoint.protocol import StepOptions

SECRET = "hook-secret"


async def test_a_receiver_down_for_a_while_hears_later_that_the_run_was_approved(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """The issue's "receiver down for a minute", scaled down by the run's StepOptions: retries
    0.2 s, then at most 0.5 s apart, 40 tries (about 20 s) and a 20 s drain at the run's end.
    The receiver comes up after the `waiting` notice was refused three times and the run was
    approved in the console and paid; it then hears both notices, once each."""
    hook = Receiver(secret=SECRET)
    hook.port = free_port()  # nobody listens there yet: each send is refused
    payments = Payments(tmp_path / "payments.db")
    agent = build_agent(payments, PAY_SCRIPT, approval=True)
    console = await start_console(make_console(client, tmp_path, task_queue), port=0)
    console_url = console.url()
    notify_file = tmp_path / "notify.toml"
    notify_file.write_text(
        f'[console]\nurl = "{console_url}"\n\n'
        f'[channels.hook]\ntype = "webhook"\nurl = "{hook.url}"\nsecret_env = "HOOK_SECRET"\n\n'
        '[agents.payer]\nroutes = { approver = ["hook"] }\n'
    )
    notify = load_notify(notify_file, {"HOOK_SECRET": SECRET}, [agent])
    options = StepOptions(
        retry_initial_interval=timedelta(seconds=0.2),
        retry_max_interval=timedelta(seconds=0.5),
        notice_max_attempts=40,
        notice_drain=timedelta(seconds=20),
    )
    try:
        async with running_worker(
            client,
            [agent],
            task_queue,
            notify=notify,
            console_secret="test-secret",  # make_console's: the link opens in that console
            attempt_journal=tmp_path / "attempts",
        ):
            handle = await runs.start_run(
                client, "payer", "pay ada 5", task_queue=task_queue, options=options
            )
            pending = await the_pending_approval(client, handle.id)

            async def refused_twice() -> bool:
                described = await handle.describe()
                return any(
                    a.activity_type.name == "waypoint.notify" and a.attempt >= 3
                    for a in described.raw_description.pending_activities
                )

            await wait_until(refused_twice, "the waiting notice was refused and retried")
            async with httpx.AsyncClient(base_url=console_url) as http:
                body = {"step_id": pending.step_id, "arguments_hash": pending.arguments_hash}
                token = {"Authorization": "Bearer wpt_app-token"}
                done = await http.post(f"/api/runs/{handle.id}/approve", json=body, headers=token)
                assert done.status_code == 200, done.text

            async def paid() -> bool:
                return payments.count() == 1

            await wait_until(paid, "the approved call ran while the receiver was still down")
            assert hook.requests == []  # nothing arrived: the run did not wait for it
            await hook.start()  # the receiver is back on its port
            result = await handle.result()
            detail = await run_detail(client, handle.id)
    finally:
        await hook.stop()
        await console.stop()
    key = f"{handle.id}/{handle.first_execution_run_id}/{pending.step_id}"
    arrived = Counter(r.headers["waypoint-key"] for r in hook.requests)
    assert arrived == {f"{key}/waiting/1": 1, f"{key}/decided/1": 1}  # once each
    assert hook.forged == 0 and len(hook.keys) == 2
    notices = {r.json()["notice"]["event"]: r.json() for r in hook.requests}
    decided = notices["decided"]["notice"]
    assert decided["decision"] == "approved" and "app via console" in decided["decided_by"]
    assert notices["waiting"]["link"].startswith(f"{console_url}/r/")
    assert payments.count() == 1
    lines = notice_lines(result.ledger)
    assert set(lines) == {
        f"{pending.step_id}.notice.waiting.1.hook",
        f"{pending.step_id}.notice.decided.1.hook",
    }
    assert all(status == "completed" and ": sent" in said for status, said in lines.values())
    assert notice_lines(detail.ledger) == lines  # what `waypoint status` and the console show
