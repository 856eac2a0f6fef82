"""Reads as the run saw them: each `fresh_for` read keyed, dated as it ended, forked as it was.

A small market on SQLite: `quote` reads an item's price (and counts every read it serves),
`buy` records a purchase unique on its effect key. Each test plays one of issue 48's stories on
the real dev server, and each failed on 200d38b: a poller whose re-reads grew with every turn, an
older copy of a read refusing an approved effect, a turn-mode read dated when its whole turn
ended, a fork comparing with the source's later value, a policy set while reads were re-read
that the effect never met, and an approval whose call was then refused answering like one that
ran.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from temporalio.client import Client, WorkflowHandle
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from tests.conftest import SMALL_HISTORY, running_worker, the_pending_approval
from waypoint._agent import Agent
from waypoint._providers.scripted import ScriptedModel
from waypoint._tools import ToolContext, tool
from waypoint._workflows.agent import AgentWorkflow
from waypoint.client import decisions, runs
from waypoint.client.decisions import set_policy
from waypoint.client.events import events as run_events
from waypoint.errors import ToolDefinitionError
from waypoint.protocol import (
    APPROVED_NOT_RUN,
    AgentState,
    ModelRequest,
    ModelResponse,
    RunResult,
)
from waypoint.protocol.events import StepFailed
from waypoint.protocol.policy import ApprovalPolicy, Rule
from waypoint.testing import reply, text, tool_use

WINDOW = timedelta(milliseconds=500)
PAST = WINDOW.total_seconds() * 2.5
"""A wait longer than the window: workflow time passes it."""


class Item(BaseModel):
    item: str


class Purchase(BaseModel):
    item: str
    price: int


class Market:
    """Prices, purchases and a count of every quote served, in one SQLite file."""

    def __init__(self, path: Path, **prices: int) -> None:
        self.path = path
        with self._db() as db:
            db.execute("CREATE TABLE prices (item TEXT PRIMARY KEY, price INTEGER)")
            db.execute("CREATE TABLE purchases (key TEXT PRIMARY KEY, item TEXT, price INTEGER)")
            db.execute("CREATE TABLE served (n INTEGER)")
            db.execute("INSERT INTO served VALUES (0)")
        for item, price in prices.items():
            self.set_price(item, price)

    def _db(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path, isolation_level=None)

    def set_price(self, item: str, price: int) -> None:
        with self._db() as db:
            db.execute("INSERT OR REPLACE INTO prices VALUES (?, ?)", (item, price))

    def quote(self, item: str) -> int:
        with self._db() as db:
            db.execute("UPDATE served SET n = n + 1")
            return db.execute("SELECT price FROM prices WHERE item = ?", (item,)).fetchone()[0]

    def buy(self, key: str, item: str, price: int) -> None:
        with self._db() as db:
            db.execute("INSERT OR IGNORE INTO purchases VALUES (?, ?, ?)", (key, item, price))

    def purchases(self) -> list[tuple[str, int]]:
        with self._db() as db:
            return db.execute("SELECT item, price FROM purchases").fetchall()

    def served(self) -> int:
        with self._db() as db:
            return db.execute("SELECT n FROM served").fetchone()[0]


def market_tools(market: Market, *, approval: bool = True, **quote_options: Any) -> list[Any]:
    @tool("read", fresh_for=quote_options.pop("fresh_for", WINDOW), **quote_options)
    def quote(args: Item) -> str:
        """The item's price now."""
        return f"{args.item}: {market.quote(args.item)}"

    @tool("effect", idempotent=True, requires_approval=approval)
    def buy(args: Purchase, ctx: ToolContext) -> str:
        """Buy the item at the price given."""
        market.buy(ctx.effect_key or "", args.item, args.price)
        return f"bought {args.item} at {args.price}"

    return [quote, buy]


def trader(tools: list[Any], script: list[Any], **options: Any) -> Agent:
    return Agent(
        name="trader",
        model="claude-sonnet-4-6",
        system="You buy at the price quoted.",
        tools=tools,
        script=script,
        **options,
    )


def quote_then_buy(price: int, said: str) -> list[Any]:
    """A script that quotes gold, buys it at `price`, then says `said`."""
    return [
        reply(tool_use("quote", item="gold")),
        reply(tool_use("buy", item="gold", price=price)),
        reply(text(said)),
    ]


@asynccontextmanager
async def trading(
    client: Client,
    task_queue: str,
    agent: Agent,
    task: str = "buy gold",
    scripted: ScriptedModel | None = None,
    **start: Any,
) -> AsyncIterator[WorkflowHandle[Any, RunResult]]:
    """The trader's run on `task` (`start` goes to `start_run`), on a worker of its own."""
    async with running_worker(client, [agent], task_queue, scripted=scripted):
        yield await runs.start_run(client, "trader", task, task_queue=task_queue, **start)


def careful(request: ModelRequest) -> ModelResponse:
    """A model that buys at 100 unless it was told the quote moved (as Claude would read it)."""
    told = any(
        "read again now returns" in getattr(b, "text", "")
        for m in request.messages
        for b in m.content
    )
    if told:
        return reply(text("The price moved; not buying."))
    return reply(tool_use("buy", item="gold", price=100))


async def replayed(client: Client, run: str) -> None:
    """The run's history replays on today's workflow code."""
    history = await client.get_workflow_handle(run).fetch_history()
    await Replayer(
        workflows=[AgentWorkflow], data_converter=pydantic_data_converter
    ).replay_workflow(history)


def refreshes(result: RunResult) -> list[str]:
    return [f"{r.step_id}: {r.summary}" for r in result.ledger if ".fresh" in r.step_id]


async def test_a_poller_holds_one_read_per_key_so_re_reads_stay_bounded(
    client: Client, tmp_path: Path, task_queue: str
) -> None:
    """Ten turns reading one status hold one read: at most one re-read before each model step."""
    market = Market(tmp_path / "market.db", job=1)
    turns = 10
    script = [reply(tool_use("quote", item="job")) for _ in range(turns)] + [reply(text("Done."))]
    agent = trader(market_tools(market, fresh_for=timedelta(milliseconds=1)), script)
    async with trading(client, task_queue, agent, "poll", history=SMALL_HISTORY) as handle:
        await handle.result()
        status = await runs.status(client, handle.id)
        state = await handle.query("fork_state", turns, result_type=AgentState)
    # One read a turn, and before each later model step one re-read of the one read in play.
    # On 200d38b every turn's copy was held and re-read: 10 + (1 + 2 + ... + 10) = 65, and
    # what crossed each continue-as-new grew with it.
    assert status.continues > 0, "the run crossed no continue-as-new"
    assert market.served() <= 2 * turns, market.served()
    assert status.fresh is not None and status.fresh.held == 1, status.fresh
    # A fork after any verbatim turn may need that turn's copy: at most one a verbatim turn.
    verbatim = turns - state.compacted_turns
    assert len(state.observations) == 1 and len(state.earlier_reads) <= verbatim, state
    await replayed(client, handle.id)


async def test_a_fork_after_a_compaction_keeps_the_compacted_turns_reads(
    client: Client, tmp_path: Path, task_queue: str
) -> None:
    """A quote from turn 1, folded into a summary, is still held: a fork after turn 8 holds it."""
    market = Market(tmp_path / "market.db", gold=100, tin=1)
    turns = 9
    script = [
        reply(tool_use("quote", item="gold")),
        *(reply(tool_use("quote", item="tin")) for _ in range(turns - 1)),
        reply(text("Done.")),
    ]
    agent = trader(market_tools(market, fresh_for=timedelta(hours=1)), script)
    async with trading(client, task_queue, agent, "quote", history=SMALL_HISTORY) as handle:
        await handle.result()
        state = await handle.query("fork_state", turns - 1, result_type=AgentState)
    assert state.compacted_turns >= 1, "turn 1 was not compacted"
    held = sorted(o.arguments["item"] for o in state.observations)
    assert held == ["gold", "tin"], state.observations  # 200d38b: ["tin"], gold dropped


async def test_a_fork_from_before_a_read_was_dropped_still_holds_it(
    client: Client, tmp_path: Path, task_queue: str
) -> None:
    """Turn 2 could not read the quote again (the policy now denies it) and dropped it: a fork
    after turn 1 still holds it, to read again before its buy (torture seed 90378)."""
    market = Market(tmp_path / "market.db", gold=100)
    script = quote_then_buy(100, "Stopped.")
    denies = ApprovalPolicy(rules=[Rule(tool="quote", action="deny")])
    async with trading(client, task_queue, trader(market_tools(market), script)) as handle:
        pending = await the_pending_approval(client, handle.id)
        await set_policy(client, handle.id, denies, reviewer="risk")
        await asyncio.sleep(PAST)
        await decisions.approve(client, handle.id, pending.step_id, reviewer="desk")
        await handle.result()
        after_1, after_2 = [
            await handle.query("fork_state", turn, result_type=AgentState) for turn in (1, 2)
        ]
    assert market.purchases() == [], "the buy ran on a quote the run could not read again"
    # dac0b08: [] (a dropped read left no copy, so the fork bought on it unread)
    assert [o.arguments["item"] for o in after_1.observations] == ["gold"], after_1.observations
    assert after_2.observations == [], "turn 2's results told the model it was dropped"


async def test_the_newest_copy_of_a_read_decides_not_an_older_one(
    client: Client, tmp_path: Path, task_queue: str
) -> None:
    """Read 100, then 150; approved after the window, it re-reads 150: unchanged, it runs."""
    market = Market(tmp_path / "market.db", gold=100)
    script = [
        reply(tool_use("quote", item="gold")),
        reply(tool_use("quote", item="gold")),
        reply(tool_use("buy", item="gold", price=150)),
        reply(text("Bought.")),
    ]
    # The price moves between the two reads.

    def moved(request: ModelRequest) -> float:
        if request.turn == 2 and request.purpose != "compact":
            market.set_price("gold", 150)
        return 0.0

    scripted = ScriptedModel({"trader": script}, latency_of=moved)
    agent = trader(market_tools(market), script)
    async with trading(client, task_queue, agent, scripted=scripted) as handle:
        pending = await the_pending_approval(client, handle.id)
        await asyncio.sleep(PAST)
        sent = await decisions.approve(client, handle.id, pending.step_id, reviewer="desk")
        result = await handle.result()
    assert sent.recorded and sent.runs is True, sent.receipt
    assert market.purchases() == [("gold", 150)]
    assert all("CHANGED" not in line for line in refreshes(result)), refreshes(result)
    await replayed(client, handle.id)


async def test_an_approval_whose_call_is_then_refused_says_so(
    client: Client, tmp_path: Path, task_queue: str
) -> None:
    """The price moved while the approval waited: the approve answer says the buy did not run."""
    market = Market(tmp_path / "market.db", gold=100)
    script = quote_then_buy(100, "Not bought.")
    async with trading(client, task_queue, trader(market_tools(market), script)) as handle:
        pending = await the_pending_approval(client, handle.id)
        market.set_price("gold", 120)
        await asyncio.sleep(PAST)
        sent = await decisions.approve(client, handle.id, pending.step_id, reviewer="desk")
        result = await handle.result()
        seen = [e async for e in run_events(client, handle.id, live=False)]
    receipt = sent
    assert receipt is not None and receipt.runs is False, receipt
    assert receipt.detail.startswith(APPROVED_NOT_RUN) and "120" in receipt.detail, receipt
    assert market.purchases() == []
    (line,) = [r for r in result.ledger if r.step_id == pending.step_id]
    assert line.summary.startswith(APPROVED_NOT_RUN), line
    failed = [e for e in seen if isinstance(e, StepFailed)]
    assert [e.step_id for e in failed if e.approved_not_run] == [pending.step_id], failed
    await replayed(client, handle.id)


async def test_a_turn_mode_read_is_dated_as_it_ended_not_as_its_turn_did(
    client: Client, tmp_path: Path, task_queue: str
) -> None:
    """A quick quote beside a slow read: the quote is as old as the slow read took, re-read."""
    market = Market(tmp_path / "market.db", gold=100)

    @tool("read")
    def ledger_export(args: Item) -> str:
        """A slow report (a thread-bound call, as a user's would be)."""
        deadline = time.monotonic() + 30  # the quote beside it runs at once: let it read first
        while market.served() < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        market.set_price(args.item, 130)  # the market moves while the report runs
        time.sleep(2 * PAST)  # far past the window: a busy machine may stamp the quote late
        return "exported"

    script = [
        reply(tool_use("quote", item="gold"), tool_use("ledger_export", item="gold")),
        careful,
        reply(text("Done.")),
    ]
    tools = [*market_tools(market, approval=False), ledger_export]
    async with trading(client, task_queue, trader(tools, script, durability="turn")) as handle:
        result = await handle.result()
    # Dated when the turn ended (200d38b), the quote looked fresh: no re-read, bought at 100.
    shown = [f"{r.step_id} {r.status}: {r.summary}" for r in result.ledger]
    assert any("refreshed, CHANGED" in line for line in refreshes(result)), shown
    assert market.purchases() == []
    await replayed(client, handle.id)


async def test_a_fork_compares_with_what_it_held_at_its_fork_point(
    client: Client, tmp_path: Path, task_queue: str
) -> None:
    """The source re-read 120 in turn 2; a fork after turn 1 still holds 100, and is told."""
    market = Market(tmp_path / "market.db", gold=100)
    script = [reply(tool_use("quote", item="gold")), careful, reply(text("Stopped."))]
    async with trading(client, task_queue, trader(market_tools(market), script)) as source:
        pending = await the_pending_approval(client, source.id)
        market.set_price("gold", 120)
        await asyncio.sleep(PAST)
        await decisions.approve(client, source.id, pending.step_id, reviewer="desk")
        done = await source.result()
        assert [line[:38] for line in refreshes(done)] == [
            "t1.tool.1.quote.fresh1: refreshed, CHA"
        ], done.ledger
        fork = await runs.fork(client, source.id, 1, task_queue=task_queue)
        forked = await fork.result()
    # Its own re-read, compared with the 100 it held (on 200d38b: the source's 120, "unchanged",
    # beside the source's refresh line made after the fork point, and a buy at 100).
    assert [line[:38] for line in refreshes(forked)] == [
        "t1.tool.1.quote.fresh1: refreshed, CHA"
    ], forked.ledger
    assert [r.made_in for r in forked.ledger if ".fresh" in r.step_id] == [2]
    assert market.purchases() == [], "neither run bought at the stale 100"
    await replayed(client, fork.id)


async def test_a_fresh_key_compares_the_price_not_the_stamp(
    client: Client, tmp_path: Path, task_queue: str
) -> None:
    """A quote stamped `quoted_at` on every answer: with fresh_key=["price"] the buy still runs."""
    market = Market(tmp_path / "market.db", gold=100)

    @tool("read", fresh_for=WINDOW, fresh_key=["price"])
    def quote(args: Item) -> dict[str, Any]:
        """The item's price now, stamped."""
        return {"price": market.quote(args.item), "quoted_at": datetime.now(UTC).isoformat()}

    buy = market_tools(market)[1]
    script = quote_then_buy(100, "Bought.")
    async with trading(client, task_queue, trader([quote, buy], script)) as handle:
        pending = await the_pending_approval(client, handle.id)
        await asyncio.sleep(PAST)
        sent = await decisions.approve(client, handle.id, pending.step_id, reviewer="desk")
        result = await handle.result()
    assert sent.recorded and sent.runs is True, sent.receipt
    assert [line.split(": ", 1)[1][:20] for line in refreshes(result)] == ["refreshed, unchanged"]
    assert market.purchases() == [("gold", 100)]


async def test_a_policy_set_while_reads_are_re_read_stops_the_effect_for_a_person(
    client: Client, tmp_path: Path, task_queue: str
) -> None:
    """`policy set` lands while the buy's reads are re-read: the buy waits for a person."""
    market = Market(tmp_path / "market.db", gold=100)
    rereading, release = threading.Event(), threading.Event()

    @tool("read", fresh_for=WINDOW)
    def quote(args: Item) -> str:
        """The item's price now."""
        price = market.quote(args.item)
        if market.served() > 1:  # the re-read before the buy: hold it until the policy is set
            rereading.set()
            release.wait(timeout=60)
        return f"{args.item}: {price}"

    buy = market_tools(market, approval=False)[1]
    script = quote_then_buy(100, "Bought.")
    # The buy's reply takes longer than the window, so its quote is stale only after it.
    slow = ScriptedModel(
        {"trader": script},
        latency_of=lambda r: PAST if r.turn == 2 and r.purpose != "compact" else 0,
    )
    asks = ApprovalPolicy(rules=[Rule(tool="buy", action="ask")])
    async with trading(client, task_queue, trader([quote, buy], script), scripted=slow) as handle:
        assert await asyncio.to_thread(rereading.wait, 60), "the buy's re-read never started"
        await set_policy(client, handle.id, asks, reviewer="risk")
        release.set()
        pending = await the_pending_approval(client, handle.id)
        assert pending.step_id == "t2.tool.1.buy" and market.purchases() == []
        await decisions.approve(client, handle.id, pending.step_id, reviewer="risk")
        result = await handle.result()
    assert market.purchases() == [("gold", 100)]
    (line,) = [r for r in result.ledger if r.step_id == "t2.tool.1.buy"]
    assert line.decided_by and line.decided_by.startswith("risk"), line
    await replayed(client, handle.id)


def test_fresh_key_picks_fields_or_a_function_and_falls_back_to_the_whole_result() -> None:
    """What counts for "changed": the fields named, a function's answer, else ''."""

    def stamped(fresh_key: Any) -> Any:
        @tool("read", fresh_for=WINDOW, fresh_key=fresh_key)
        def quote(args: Item) -> dict[str, Any]:
            """A quote."""
            return {}

        return quote

    by_field = stamped(["price"])
    assert by_field.fresh_basis({"price": 1, "at": "a"}) == by_field.fresh_basis(
        {"price": 1, "at": "b"}
    )
    assert by_field.fresh_basis({"price": 1}) != by_field.fresh_basis({"price": 2})
    assert by_field.fresh_basis("a text result") == ""  # no fields: the whole result counts
    by_function = stamped(lambda r: r["price"] // 10)
    assert by_function.fresh_basis({"price": 101}) == by_function.fresh_basis({"price": 109})
    assert stamped(lambda r: r["missing"]).fresh_basis({"price": 1}) == ""
    assert stamped(["prcie"]).fresh_basis({"price": 1}) == ""  # a misspelt field: the whole
    for bad in ("price", [], [1]):
        with pytest.raises(ToolDefinitionError, match="fresh_key takes"):
            stamped(bad)
