"""`fresh_for` where it meets the rest: a sub-agent, an operator's retry, a parked model step and
a correction. Each is the vendor story (a sanctions list on disk, a SQLite vendor table unique on
the effect key) with a wait longer than the screen's window, on the real dev server.
"""

from __future__ import annotations

import asyncio
import sqlite3
from datetime import timedelta
from pathlib import Path

from temporalio.client import Client

from tests.conftest import Claude, running_worker, the_pending_approval, wait_for_state
from tests.fake_messages_api import FakeMessagesAPI
from tests.fake_messages_api import text as api_text
from tests.fake_messages_api import tool_use as api_tool_use
from tests.test_freshness import WINDOW, Screen, Vendor, unlisted, vendor_agent, vendors
from waypoint._agent import Agent
from waypoint._tools import ToolContext, tool
from waypoint.client import decisions, runs
from waypoint.protocol import Correction, Resolution, ResumeRequest, StepOptions
from waypoint.testing import reply, text, tool_use

LISTED = "Acme Shell Co\nNorthwind\n"
WAIT = WINDOW.total_seconds() * 2
"""Longer than the window: workflow time passes it while the run waits."""


def create(db: Path, key: str, name: str) -> None:
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS vendors (key TEXT PRIMARY KEY, name TEXT)")
        conn.execute("INSERT OR IGNORE INTO vendors VALUES (?, ?)", (key, name))


def screen_tool(sanctions: Path, padding: int = 0):  # type: ignore[no-untyped-def]
    @tool("read", fresh_for=WINDOW)
    def screen_sanctions(args: Screen) -> str:
        """Screen a name against the sanctions list."""
        listed = sanctions.read_text().splitlines()
        found = "match: do not onboard" if args.name in listed else "no match"
        return found + " (list " + "x" * padding + ")" if padding else found

    return screen_sanctions


async def test_a_sub_agent_is_not_started_on_a_screen_that_changed_while_it_waited(
    client: Client, tmp_path: Path, task_queue: str
) -> None:
    """A sub-agent is an effect behind the same funnel: fresh reads, or it does not start."""
    sanctions, db = unlisted(tmp_path)

    @tool("effect", idempotent=True)
    def create_vendor(args: Vendor, ctx: ToolContext) -> str:
        """Create the vendor record."""
        create(db, ctx.effect_key or "", args.name)
        return f"created {args.name}"

    clerk = Agent(
        name="clerk",
        model="claude-sonnet-4-6",
        system="You create vendor records.",
        tools=[create_vendor],
        script=[reply(tool_use("create_vendor", name="Northwind")), reply(text("Created."))],
    )
    onboarder = Agent(
        name="onboarder",
        model="claude-sonnet-4-6",
        system="You onboard vendors.",
        tools=[screen_tool(sanctions), clerk.as_tool(input_type=Vendor, requires_approval=True)],
        script=[
            reply(tool_use("screen_sanctions", name="Northwind")),
            reply(tool_use("clerk", name="Northwind")),
            reply(text("Stopped.")),
        ],
    )
    async with running_worker(client, [onboarder, clerk], task_queue) as scripted:
        handle = await runs.start_run(client, "onboarder", "onboard", task_queue=task_queue)
        pending = await the_pending_approval(client, handle.id)
        sanctions.write_text(LISTED)
        await asyncio.sleep(WAIT)
        await runs.approve(client, handle.id, pending.step_id, reviewer="officer")
        result = await handle.result()
    by_id = {r.step_id: r for r in result.ledger}
    assert "relied on changed" in by_id["t2.tool.1.clerk"].summary
    assert vendors(db) == 0  # the child never ran
    assert not [r for r in scripted.requests if r.agent == "clerk"]
    assert result.output == "Stopped."


async def test_an_operators_retry_after_a_change_parks_again_and_a_second_runs_it(
    client: Client, tmp_path: Path, task_queue: str
) -> None:
    """The effect may have happened, so a change never refuses it: the operator is told."""
    sanctions, db = unlisted(tmp_path)
    tries = {"create": 0, "lookup": 0}

    @tool("effect", max_attempts=1)
    def create_vendor(args: Vendor, ctx: ToolContext) -> str:
        """Create the vendor record."""
        tries["create"] += 1
        if tries["create"] == 1:
            raise ConnectionError("the vendor system timed out")
        create(db, ctx.effect_key or "", args.name)
        return f"created {args.name}"

    @create_vendor.reconcile
    def find_vendor(args: Vendor, ctx: ToolContext) -> str | None:  # a plain def, as users write
        tries["lookup"] += 1
        if tries["lookup"] == 1:
            raise ConnectionError("the lookup timed out too")
        return None  # it did not happen

    agent = Agent(
        name="onboarder",
        model="claude-sonnet-4-6",
        system="You onboard vendors.",
        tools=[screen_tool(sanctions), create_vendor],
        script=[
            reply(tool_use("screen_sanctions", name="Northwind")),
            reply(tool_use("create_vendor", name="Northwind")),
            reply(text("Finished.")),
        ],
    )
    async with running_worker(client, [agent], task_queue) as scripted:
        handle = await runs.start_run(client, "onboarder", "onboard", task_queue=task_queue)
        await wait_for_state(client, handle.id, "needs_reconciliation")
        sanctions.write_text(LISTED)
        await asyncio.sleep(WAIT)
        step = "t2.tool.1.create_vendor"
        retry = Resolution(step_id=step, action="retry", reviewer="ops")
        await decisions.resolve(client, handle.id, retry)
        again = await wait_for_state(client, handle.id, "needs_reconciliation")
        (unresolved,) = again.unresolved
        assert unresolved.reason.startswith("what create_vendor relied on changed")
        assert "match: do not onboard" in unresolved.reason
        assert vendors(db) == 0
        await decisions.resolve(client, handle.id, retry)  # the operator has seen the change
        result = await handle.result()
    assert result.output == "Finished."
    assert vendors(db) == 1 and tries["create"] == 2  # run once more, on the new screen
    told = scripted.requests[-1].model_dump_json()
    assert "Read again before create_vendor was retried" in told


async def test_a_model_step_back_from_an_outage_is_asked_with_the_screen_read_again_whole(
    client: Client, tmp_path: Path, task_queue: str, api: FakeMessagesAPI, claude: Claude
) -> None:
    """Parked past the window, the step is asked again with what changed, not one char cut."""
    sanctions, _ = unlisted(tmp_path)
    agent = Agent(
        name="screener",
        model="claude-sonnet-4-6",
        system="You screen vendors.",
        tools=[screen_tool(sanctions, padding=2000)],
    )
    api.enqueue_message(api_tool_use("screen_sanctions", {"name": "Northwind"}))
    api.enqueue_error(529)
    api.enqueue_message(api_text("Northwind is listed now."))
    once = StepOptions(model_max_attempts=1, retry_initial_interval=timedelta(milliseconds=50))
    async with running_worker(client, [agent], task_queue, claude=claude(api)):
        handle = await runs.start_run(
            client, "screener", "screen", task_queue=task_queue, options=once
        )
        await wait_for_state(client, handle.id, "model_unavailable")
        sanctions.write_text(LISTED)
        await asyncio.sleep(WAIT)
        await handle.signal("resume", ResumeRequest(reviewer="ops"))
        result = await handle.result()
    models = [r.step_id for r in result.ledger if r.kind == "model"]
    assert models == ["t1.model", "t2.model", "t2.model.f1"]
    prompt = str(api.message_requests[-1].body["messages"])
    assert "read again now returns: match: do not onboard (list " + "x" * 2000 + ")" in prompt
    assert result.output == "Northwind is listed now."


async def test_a_corrected_screen_is_the_operators_word_and_is_not_read_again(
    client: Client, tmp_path: Path, task_queue: str
) -> None:
    sanctions, db = unlisted(tmp_path)
    agent = vendor_agent(sanctions, db, WINDOW)
    async with running_worker(client, [agent], task_queue):
        handle = await runs.start_run(client, "onboarder", "onboard", task_queue=task_queue)
        pending = await the_pending_approval(client, handle.id)
        fix = Correction(
            step_id="t1.tool.1.screen_sanctions",
            result="no match (checked by hand)",
            reviewer="ops",
        )
        await decisions.correct(client, handle.id, fix)
        await asyncio.sleep(WAIT)
        await runs.approve(client, handle.id, pending.step_id, reviewer="officer")
        result = await handle.result()
    assert not [r for r in result.ledger if ".fresh" in r.step_id]
    (corrected,) = [r for r in result.ledger if r.kind == "operator"]
    assert "no longer read again" in corrected.summary
    assert vendors(db) == 1
