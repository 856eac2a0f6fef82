"""A worker SIGKILLed while it delivers notices: one chat message, one notice per webhook key.

The notices are sent by a real `waypoint worker` process to receivers that hold each request
unanswered until the process is killed. Its restart frees the killed attempts at once (the
attempt journal); the retry finds the delivery store's `sending` row: the Slack notice is not
sent again (`unknown`: it may have arrived), the webhook's is (its receiver counts the key once).
"""

from __future__ import annotations

import asyncio
import os
import uuid
from pathlib import Path

import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from tests.conftest import wait_until
from tests.notify_receivers import NotifyProbe, Probe, Receiver, channels, notice
from waypoint.protocol.notices import Delivery, NoticeRequest
from waypoint.testing import WorkerProcess

ROOT = Path(__file__).parent.parent
SECRET = "hook-secret"


def worker_process(
    env: WorkflowEnvironment, queue: str, tmp_path: Path, journal: str = "attempts", **extra: str
):
    notify = tmp_path / "notify.toml"
    return WorkerProcess(
        "tests.harness_app:agents",
        {
            **{k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC")},
            "TEMPORAL_ADDRESS": env.client.service_client.config.target_host,
            "WAYPOINT_TASK_QUEUE": queue,
            "WAYPOINT_ATTEMPT_JOURNAL": str(tmp_path / journal),
            "WAYPOINT_NOTIFY": str(notify),
            "WAYPOINT_CONSOLE_SECRET": str(tmp_path / "console-secret"),
            "HOOK_SECRET": SECRET,
            "PYTHONPATH": str(ROOT),
            **extra,
        },
        tmp_path / "worker.log",
    )


@pytest.mark.parametrize("elsewhere", [False, True], ids=["same_host", "another_host"])
async def test_a_worker_killed_mid_delivery_sends_one_message(
    env: WorkflowEnvironment, client: Client, task_queue: str, tmp_path: Path, elsewhere: bool
) -> None:
    """`another_host`: the retries land on a worker with a delivery store of its own, which
    never saw the cut send (it waits out the killed attempt's heartbeat timeout)."""
    hook = await Receiver(secret=SECRET, holding=True).start()
    chat = await Receiver(holding=True).start()
    (tmp_path / "notify.toml").write_text(channels(hook, console="http://127.0.0.1:1"))
    worker = worker_process(env, task_queue, tmp_path, SLACK_URL=chat.url)
    probes = f"probes-{uuid.uuid4().hex[:6]}"
    sent = notice(run=f"run-{uuid.uuid4().hex[:6]}")
    try:
        async with Worker(client, task_queue=probes, workflows=[NotifyProbe]):
            worker.start()
            handles = [
                await client.start_workflow(
                    NotifyProbe.run,
                    Probe(request=NoticeRequest(notice=sent, channel=name), queue=task_queue),
                    id=f"probe-{name}-{uuid.uuid4().hex[:6]}",
                    task_queue=probes,
                    result_type=Delivery,
                )
                for name in ("slack", "hook")
            ]
            await asyncio.wait_for(chat.arrived.wait(), 30)
            await asyncio.wait_for(hook.arrived.wait(), 30)
            worker.kill()  # both sends were on their way, unanswered
            chat.release()
            hook.release()
            if elsewhere:
                worker = worker_process(env, task_queue, tmp_path, "other-host", SLACK_URL=chat.url)
            worker.start()  # frees the killed attempts (same host): the retries start now
            slack, webhook = [await h.result() for h in handles]
    finally:
        worker.kill()
        await hook.stop()
        await chat.stop()
    assert (slack.status, slack.attempts) == ("unknown", 2), slack
    assert len(chat.requests) == 1  # one message in the channel
    assert (webhook.status, webhook.attempts) == ("sent", 2), webhook
    assert len(hook.requests) == 2 and hook.keys == {sent.key: 1} and hook.forged == 0
    link = hook.requests[1].json()["link"]
    assert link.startswith("http://127.0.0.1:1/r/")  # signed with the console's secret file
    assert (tmp_path / "console-secret").read_text().strip()


async def test_a_worker_with_a_broken_notifications_file_does_not_start(
    env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    (tmp_path / "notify.toml").write_text('[channels.slack]\ntype = "slack"\nurl_env = "NOPE"\n')
    worker = worker_process(env, task_queue, tmp_path)
    try:
        worker.start(timeout=30)
    except RuntimeError:
        pass
    finally:
        worker.kill()

    async def said() -> bool:
        return "url_env: $NOPE is not set" in (tmp_path / "worker.log").read_text()

    await wait_until(said, "the worker refused its notifications file")
    log = (tmp_path / "worker.log").read_text()
    assert f"{tmp_path / 'notify.toml'}:3: channels.slack.url_env: $NOPE is not set" in log
    assert worker.process is not None and worker.process.poll() == 1
