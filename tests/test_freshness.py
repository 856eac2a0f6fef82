"""`fresh_for`: a screen recorded before a long wait is read again before the effect acts on it.

The vendor story with a short window: the sanctions screen is recorded, the approval comes
after the window, so the screen runs again as its own step before `create_vendor`. When the
sanctions list is unchanged the vendor is created as approved; when it changed meanwhile, the
record is not created and the model hears why. Real parts: a sanctions list in a file the
tool reads on each call, a SQLite vendor table unique on the effect key, a replay of each
history.
"""

from __future__ import annotations

import asyncio
import sqlite3
from datetime import timedelta
from pathlib import Path

import pytest
from pydantic import BaseModel
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from tests.conftest import running_worker, the_pending_approval, wait_until
from waypoint._agent import Agent
from waypoint._cli import render
from waypoint._tools import ToolContext, tool
from waypoint._workflows.agent import AgentWorkflow
from waypoint.client import runs, views
from waypoint.errors import ToolDefinitionError
from waypoint.testing import reply, text, tool_use

WINDOW = timedelta(milliseconds=400)


class Screen(BaseModel):
    name: str


class Vendor(BaseModel):
    name: str


def vendor_agent(sanctions: Path, db: Path, fresh_for: timedelta) -> Agent:
    """Screen a supplier against a sanctions list on disk, then create its vendor record."""

    @tool("read", fresh_for=fresh_for)
    def screen_sanctions(args: Screen) -> str:
        """Screen a name against the sanctions list."""
        listed = sanctions.read_text().splitlines()
        return "match: do not onboard" if args.name in listed else "no match"

    @tool("effect", idempotent=True, requires_approval=True)
    def create_vendor(args: Vendor, ctx: ToolContext) -> str:
        """Create the vendor record."""
        with sqlite3.connect(db) as conn:
            conn.execute("CREATE TABLE IF NOT EXISTS vendors (key TEXT PRIMARY KEY, name TEXT)")
            conn.execute("INSERT OR IGNORE INTO vendors VALUES (?, ?)", (ctx.effect_key, args.name))
        return f"created {args.name}"

    return Agent(
        name="onboarder",
        model="claude-sonnet-4-6",
        system="You onboard vendors.",
        tools=[screen_sanctions, create_vendor],
        script=[
            reply(tool_use("screen_sanctions", name="Northwind")),
            reply(text("Clear."), tool_use("create_vendor", name="Northwind")),
            reply(text("Finished.")),
        ],
    )


def refreshes(result: object) -> list:
    """The re-screens, in the order they ran (`t1.tool.1.screen_sanctions.freshN`)."""
    found = [r for r in result.ledger if ".fresh" in r.step_id]  # type: ignore[attr-defined]
    return sorted(found, key=lambda r: int(r.step_id.rsplit("fresh", 1)[1]))


def vendors(db: Path) -> int:
    if not db.exists():
        return 0
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT count(*) FROM vendors").fetchone()[0]


def unlisted(tmp_path: Path) -> tuple[Path, Path]:
    """A sanctions list Northwind is not on (yet), and the database vendor records go to."""
    sanctions, db = tmp_path / "sanctions.txt", tmp_path / "vendors.db"
    sanctions.write_text("Acme Shell Co\n")
    return sanctions, db


async def story(
    client: Client, tmp_path: Path, task_queue: str, *, fresh_for: timedelta, listed_later: bool
):
    sanctions, db = unlisted(tmp_path)
    agent = vendor_agent(sanctions, db, fresh_for)
    async with running_worker(client, [agent], task_queue) as scripted:
        handle = await runs.start_run(
            client, "onboarder", "onboard Northwind", task_queue=task_queue
        )
        pending = await the_pending_approval(client, handle.id)
        if listed_later:
            sanctions.write_text("Acme Shell Co\nNorthwind\n")
        # The compliance officer takes longer than the window: workflow time must pass.
        await asyncio.sleep(WINDOW.total_seconds() * 2)
        await runs.approve(client, handle.id, pending.step_id, reviewer="officer")
        result = await handle.result()
        shown = await glance(client, handle.id)
    history = await handle.fetch_history()
    await Replayer(
        workflows=[AgentWorkflow], data_converter=pydantic_data_converter
    ).replay_workflow(history)
    return result, vendors(db), scripted, shown


async def glance(client: Client, run: str) -> str:
    """What `waypoint status`, the memo and the Web UI's current details say of the run."""
    view = await views.view(client, run)
    live = await views.live_status(client, run, timeout=10)
    assert live is not None and view.memo is not None and view.memo.state == "done", view.memo
    assert view.memo.fresh == live.fresh.model_copy(update={"last": view.memo.fresh.last}), live
    details = await client.get_workflow_handle(run).query("__temporal_workflow_metadata")
    return "\n".join([*render.status_lines(view), details.current_details])


async def test_an_approval_after_the_window_screens_again_and_creates_the_vendor(
    client: Client, tmp_path: Path, task_queue: str
) -> None:
    result, created, _, shown = await story(
        client, tmp_path, task_queue, fresh_for=WINDOW, listed_later=False
    )
    by_id = {r.step_id: r for r in result.ledger}
    # fresh1 is the re-screen before create_vendor, or, on a machine slow enough for the window
    # to pass before turn 2, the one before that model step; either way each says unchanged.
    fresh = refreshes(result)
    assert fresh and all(r.status == "completed" for r in fresh)
    assert all(r.summary.startswith("refreshed, unchanged") for r in fresh)
    assert by_id["t1.tool.1.screen_sanctions"].summary == "no match"  # the old result is kept
    assert by_id["t2.tool.1.create_vendor"].status == "completed"
    assert created == 1 and result.output == "Finished."
    n = len(fresh)
    assert f"reads    1 held (fresh_for), {n} read again, 0 changed" in shown  # waypoint status
    assert f"**Fresh reads** 1 held (fresh_for), {n} read again, 0 changed" in shown  # Web UI
    assert f"last {fresh[-1].step_id}: refreshed, unchanged: no match" in shown


async def test_a_sanctions_list_that_changed_meanwhile_stops_the_vendor_record(
    client: Client, tmp_path: Path, task_queue: str
) -> None:
    result, created, scripted, shown = await story(
        client, tmp_path, task_queue, fresh_for=WINDOW, listed_later=True
    )
    by_id = {r.step_id: r for r in result.ledger}
    fresh = refreshes(result)  # the last is the re-screen after the approval
    assert fresh[-1].summary.startswith("refreshed, CHANGED: match: do not onboard")
    create = by_id["t2.tool.1.create_vendor"]
    assert create.status == "error" and "relied on changed" in create.summary
    assert created == 0
    told = scripted.requests[-1].messages[-1].model_dump_json()
    assert "read again now returns: match: do not onboard" in told
    assert f"{len(fresh)} read again, 1 changed" in shown
    assert f"{fresh[-1].step_id}: refreshed, CHANGED: match" in shown
    assert "needs its own approval" in told


async def test_within_the_window_nothing_is_read_again(
    client: Client, tmp_path: Path, task_queue: str
) -> None:
    result, created, _, shown = await story(
        client, tmp_path, task_queue, fresh_for=timedelta(hours=24), listed_later=True
    )
    assert not [r for r in result.ledger if ".fresh" in r.step_id]
    assert "reads    1 held (fresh_for), 0 read again, 0 changed" in shown
    assert created == 1  # the recorded screen holds for a day, as the tool says


@pytest.mark.parametrize(
    ("kind", "fresh_for"),
    [("effect", timedelta(hours=1)), ("pure", timedelta(hours=1)), ("read", timedelta(0))],
)
def test_fresh_for_is_refused_where_it_means_nothing(kind: str, fresh_for: timedelta) -> None:
    with pytest.raises(ToolDefinitionError, match="fresh_for is for a `read` tool"):

        @tool(kind, fresh_for=fresh_for, idempotent=True)  # type: ignore[arg-type]
        def screen(args: Screen) -> str:
            """Screen."""
            return ""


async def test_parallel_effects_after_a_change_both_wait_for_the_model(
    client: Client, tmp_path: Path, task_queue: str
) -> None:
    """The first effect's refresh finds the change; the second, run on nothing fresher, is
    refused too, and an approval remembered on the first covers no call made anew."""
    sanctions, db = unlisted(tmp_path)
    agent = vendor_agent(sanctions, db, WINDOW)
    agent.script = [
        reply(tool_use("screen_sanctions", name="Northwind")),
        reply(tool_use("create_vendor", name="Northwind"), tool_use("create_vendor", name="NW")),
        reply(text("Stopped.")),
    ]
    async with running_worker(client, [agent], task_queue):
        handle = await runs.start_run(client, "onboarder", "onboard", task_queue=task_queue)

        async def both() -> bool:
            return len((await runs.status(client, handle.id)).pending_approvals) == 2

        await wait_until(both, "both calls wait for approval")
        sanctions.write_text("Acme Shell Co\nNorthwind\n")
        await asyncio.sleep(WINDOW.total_seconds() * 2)
        for p in (await runs.status(client, handle.id)).pending_approvals:
            await runs.approve(client, handle.id, p.step_id, reviewer="o", remember="tool")
        result = await handle.result()
    creates = [r for r in result.ledger if r.tool == "create_vendor" and r.kind == "tool"]
    assert [r.status for r in creates] == ["error", "error"]
    assert vendors(db) == 0
    assert result.output == "Stopped."


async def test_a_read_beside_a_call_that_waits_is_dated_when_it_was_read(
    client: Client, tmp_path: Path, task_queue: str
) -> None:
    """The screen and the vendor record in one reply: the approval comes after the window, so
    the screen made before it is stale then, and the changed list stops the record."""
    sanctions, db = unlisted(tmp_path)
    agent = vendor_agent(sanctions, db, WINDOW)
    agent.script = [
        reply(tool_use("screen_sanctions", name="Northwind"), tool_use("create_vendor", name="NW")),
        reply(text("Stopped.")),
    ]
    async with running_worker(client, [agent], task_queue):
        handle = await runs.start_run(client, "onboarder", "onboard", task_queue=task_queue)
        pending = await the_pending_approval(client, handle.id)
        sanctions.write_text("Acme Shell Co\nNorthwind\n")
        await asyncio.sleep(WINDOW.total_seconds() * 2)  # the officer takes longer than it
        await runs.approve(client, handle.id, pending.step_id, reviewer="o")
        result = await handle.result()
    fresh = refreshes(result)
    assert fresh and fresh[-1].summary.startswith("refreshed, CHANGED")
    (create,) = [r for r in result.ledger if r.tool == "create_vendor"]
    assert create.status == "error" and vendors(db) == 0
