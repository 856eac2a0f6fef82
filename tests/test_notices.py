"""Notices to the people a run waits on: told when it waits, reminded, escalated, told the end.

The delivery side's activities are stood in for by `waypoint.testing.notices` (same names and
types): a plan, and an inbox that deduplicates on (key, channel) as a receiver should.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path

from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from tests.agents import PAY_SCRIPT, Payments, build_agent
from tests.conftest import running_worker, wait_for_state, wait_until
from waypoint.client import runs
from waypoint.client.detail import run_detail
from waypoint.protocol import HistoryLimits, StepOptions
from waypoint.protocol.notices import NoticePlan
from waypoint.testing import reply, text, tool_use
from waypoint.testing.notices import ALWAYS, NoticeReceiver

PAY = "t2.tool.1.pay"


def notice_lines(ledger: list) -> dict[str, tuple[str, str]]:
    """The ledger's notice lines: step id -> (status, summary)."""
    return {r.step_id: (r.status, r.summary) for r in ledger if r.kind == "notice"}


async def test_a_waiting_call_is_told_then_its_decision_with_who(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    payments = Payments(tmp_path / "p.db")
    receiver = NoticeReceiver(
        tmp_path / "inbox.db", NoticePlan(routes={"approver": ["ops", "mail"]})
    )
    agent = build_agent(payments, PAY_SCRIPT, approval=True)
    async with running_worker(client, [agent], task_queue, activities=receiver.activities()):
        handle = await runs.start_run(client, "payer", "pay", task_queue=task_queue)
        await wait_for_state(client, handle.id, "awaiting_approval")

        async def told() -> bool:
            return len(receiver.inbox()) == 2

        await wait_until(told, "both channels were told the call waits")
        await runs.approve(client, handle.id, PAY, reviewer="grace")
        result = await handle.result()
        detail = await run_detail(client, handle.id)
    key = f"{handle.id}/{handle.first_execution_run_id}/{PAY}"
    inbox = [(*row[:4], row[4].split(" (")[0]) for row in receiver.inbox()]  # who (client)
    assert sorted(inbox) == sorted(
        [
            (f"{key}/waiting/1", "ops", "waiting", "approver", ""),
            (f"{key}/waiting/1", "mail", "waiting", "approver", ""),
            (f"{key}/decided/1", "ops", "decided", "approver", "grace"),
            (f"{key}/decided/1", "mail", "decided", "approver", "grace"),
        ]
    )
    lines = notice_lines(result.ledger)
    assert set(lines) == {
        f"{PAY}.notice.{event}.1.{channel}"
        for event in ("waiting", "decided")
        for channel in ("ops", "mail")
    }
    assert all(status == "completed" and ": sent" in said for status, said in lines.values())
    assert notice_lines(detail.ledger) == lines  # what `waypoint status`/the console read
    assert payments.count() == 1


async def test_reminders_and_escalation_come_at_their_times_and_hear_the_end(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    plan = NoticePlan(
        routes={"approver": ["ops"], "lead": ["pager"]},
        remind_after=timedelta(seconds=1),
        escalate_after=timedelta(seconds=1.5),
        escalate_to="lead",
    )
    receiver = NoticeReceiver(tmp_path / "inbox.db", plan)
    agent = build_agent(Payments(tmp_path / "p.db"), PAY_SCRIPT, approval=True)
    watched = receiver.activities()  # every task replays: the timers survive replay unchanged
    async with running_worker(
        client, [agent], task_queue, activities=watched, max_cached_workflows=0
    ):
        handle = await runs.start_run(client, "payer", "pay", task_queue=task_queue)
        pending = (await wait_for_state(client, handle.id, "awaiting_approval")).pending_approvals

        async def reminded_twice() -> bool:
            return sum(row[2] == "reminder" for row in receiver.inbox()) >= 2

        await wait_until(reminded_twice, "two reminders came")
        await runs.approve(client, handle.id, PAY, reviewer="grace")
        result = await handle.result()
    since = datetime.fromisoformat(pending[0].requested_at)
    inbox = receiver.inbox()
    events = [(key.split("/", 2)[2], channel) for key, channel, *_ in inbox]
    assert events[0] == (f"{PAY}/waiting/1", "ops")
    assert (f"{PAY}/escalated/1", "pager") in events
    assert events.count((f"{PAY}/escalated/1", "pager")) == 1  # escalated once, to the lead
    reminders = [e for e in events if "/reminder/" in e[0]]
    assert reminders[:2] == [(f"{PAY}/reminder/1", "ops"), (f"{PAY}/reminder/2", "ops")]
    assert all(channel == "ops" for _, channel in reminders)
    # the end goes to everyone told: the approver's channel and the lead's
    assert {e for e in events if "/decided/" in e[0]} == {
        (f"{PAY}/decided/1", "ops"),
        (f"{PAY}/decided/1", "pager"),
    }
    # each timer counts from the wait's start (a task's clock is its WorkflowTaskStarted time)
    fires, clock = [], since
    async for e in handle.fetch_history_events():
        if e.HasField("workflow_execution_update_accepted_event_attributes") or e.HasField(
            "workflow_execution_signaled_event_attributes"
        ):
            break  # decided: what follows waits on no reminder
        if e.HasField("workflow_task_started_event_attributes"):
            clock = e.event_time.ToDatetime().replace(tzinfo=since.tzinfo)
        elif e.HasField("timer_started_event_attributes"):
            fires.append(
                clock + e.timer_started_event_attributes.start_to_fire_timeout.ToTimedelta()
            )
    # reminders at 1, 2, 3 ... s and the escalation at 1.5 s: every timer fires on that
    # half-second grid from the wait's start (a task that came late, under load, sends what is
    # due at once and starts no timer for it), and none before the first reminder
    assert fires, "no reminder or escalation waited on a timer"
    halves = [(f - since).total_seconds() * 2 for f in fires]
    assert all(abs(h - round(h)) < 0.004 for h in halves), fires
    assert min(fires) >= since + timedelta(seconds=1) - timedelta(milliseconds=2)  # never early
    assert all(s == "completed" for s, _ in notice_lines(result.ledger).values())


async def test_a_receiver_that_is_down_or_hangs_never_holds_the_run(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    stuck = asyncio.Event()
    receiver = NoticeReceiver(
        tmp_path / "inbox.db",
        NoticePlan(routes={"approver": ["down", "stuck"]}),
        failures={"down": ALWAYS},
        hold={"stuck": stuck},
    )
    payments = Payments(tmp_path / "p.db")
    agent = build_agent(payments, PAY_SCRIPT, approval=True)
    options = StepOptions(
        notice_max_attempts=2,
        retry_initial_interval=timedelta(milliseconds=100),
        notice_drain=timedelta(seconds=1),
    )
    async with running_worker(client, [agent], task_queue, activities=receiver.activities()):
        handle = await runs.start_run(
            client, "payer", "pay", task_queue=task_queue, options=options
        )
        await wait_for_state(client, handle.id, "awaiting_approval")

        async def gave_up() -> bool:
            ledger = await runs.ledger(client, handle.id)
            line = notice_lines(ledger).get(f"{PAY}.notice.waiting.1.down")
            return line is not None and line[0] == "error"

        await wait_until(gave_up, "the down receiver's delivery gave up")
        await runs.approve(client, handle.id, PAY, reviewer="grace")
        # the stuck receiver still holds its deliveries: the run ends all the same
        result = await asyncio.wait_for(handle.result(), timeout=60)
        assert receiver.inbox() == []  # nothing was accepted, and nothing pretended it was
        stuck.set()  # let the held attempts end (they may still arrive: "not confirmed")
    assert result.output == "Paid ada 5." and payments.count() == 1
    lines = notice_lines(result.ledger)
    status, said = lines[f"{PAY}.notice.waiting.1.down"]
    assert status == "error" and "failed: receiver down" in said
    for event in ("waiting", "decided"):
        status, said = lines[f"{PAY}.notice.{event}.1.stuck"]
        assert status == "cancelled" and "not confirmed: the run ended" in said


async def test_a_delivery_in_flight_at_continue_as_new_keeps_its_key(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    held = asyncio.Event()
    receiver = NoticeReceiver(
        tmp_path / "inbox.db", NoticePlan(routes={"approver": ["ops"]}), hold={"ops": held}
    )
    script = [
        reply(tool_use("pay", payee="ada", amount=5)),
        *(reply(text(f"turn {i}"), tool_use("add", a=i, b=1)) for i in range(2, 5)),
        reply(text("done")),
    ]
    agent = build_agent(Payments(tmp_path / "p.db"), script, approval=True)
    async with running_worker(client, [agent], task_queue, activities=receiver.activities()):
        handle = await runs.start_run(
            client,
            "payer",
            "pay",
            task_queue=task_queue,
            history=HistoryLimits(max_events=40, keep_recent_turns=1),
        )
        await wait_for_state(client, handle.id, "awaiting_approval")
        await runs.approve(client, handle.id, "t1.tool.1.pay", reviewer="grace")

        async def continued() -> bool:
            return (await runs.status(client, handle.id)).continues >= 1

        await wait_until(continued, "the run continued-as-new with deliveries in flight")
        held.set()
        result = await handle.result()
        whole = (await run_detail(client, handle.id)).ledger
    key = f"{handle.id}/{handle.first_execution_run_id}/t1.tool.1.pay"
    inbox = receiver.inbox()
    assert [row[:3] for row in inbox] in (
        [(f"{key}/waiting/1", "ops", "waiting"), (f"{key}/decided/1", "ops", "decided")],
        [(f"{key}/decided/1", "ops", "decided"), (f"{key}/waiting/1", "ops", "waiting")],
    )
    tries = receiver.tries("ops")
    assert {k for k, _ in tries} == {f"{key}/waiting/1", f"{key}/decided/1"}  # no new key
    assert len(tries) > 2  # started again in the next segment, under the same keys
    lines = notice_lines(whole)
    assert {s for s, _ in lines.values()} == {"completed"}, lines
    assert set(lines) == {
        "t1.tool.1.pay.notice.waiting.1.ops",
        "t1.tool.1.pay.notice.decided.1.ops",
    }
    assert result.output == "done"


@contextmanager
def notice_worker(env: WorkflowEnvironment, queue: str, folder: Path) -> Iterator[subprocess.Popen]:
    """A `tests.notice_worker` process, ready; stopped (by its pid) when the block ends."""
    address = env.client.service_client.config.target_host
    log = (folder / "worker.log").open("ab")
    args = [sys.executable, "-m", "tests.notice_worker", address, queue, str(folder)]
    process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=log)
    try:
        assert process.stdout is not None and b"worker ready" in process.stdout.readline()
        yield process
    finally:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
        process.wait()
        log.close()
        if process.stdout is not None:
            process.stdout.close()


async def test_a_worker_killed_during_a_delivery_sends_it_once_under_its_key(
    client: Client, env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    from tests.notice_worker import PLAN

    receiver = NoticeReceiver(tmp_path / "inbox.db", PLAN)  # reads what the workers received
    options = StepOptions(notice_timeout=timedelta(seconds=2))
    with notice_worker(env, task_queue, tmp_path) as first:
        handle = await runs.start_run(
            client, "payer", "pay", task_queue=task_queue, options=options
        )

        async def reached() -> bool:
            return (tmp_path / "reached").exists()

        await wait_until(reached, "the waiting notice's delivery started")
        os.kill(first.pid, signal.SIGKILL)  # mid-delivery: nothing accepted yet
        first.wait()
    assert receiver.inbox() == []
    with notice_worker(env, task_queue, tmp_path):
        await wait_for_state(client, handle.id, "awaiting_approval")
        await runs.approve(client, handle.id, PAY, reviewer="grace")
        result = await asyncio.wait_for(handle.result(), timeout=60)
    key = f"{handle.id}/{handle.first_execution_run_id}/{PAY}"
    assert sorted(row[:3] for row in receiver.inbox()) == [  # once each, in either order
        (f"{key}/decided/1", "ops", "decided"),
        (f"{key}/waiting/1", "ops", "waiting"),
    ]
    waiting = [attempt for k, attempt in receiver.tries("ops") if k == f"{key}/waiting/1"]
    assert waiting[:2] == [1, 2]  # the killed try, then its retry under the same key
    line = next(r for r in result.ledger if r.step_id == f"{PAY}.notice.waiting.1.ops")
    assert (line.status, line.attempt) == ("completed", waiting[-1])
