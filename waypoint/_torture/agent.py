"""The agent torture scenarios run, for `waypoint worker --app waypoint._torture.agent:agents`.

Its tools cover every tool class and path: `add` (pure), `lookup` (read), `ship` (an effect
the downstream deduplicates on its key), `pay` (an effect whose downstream does not
deduplicate, so it reconciles), `transfer` (like `pay`, approval-gated) and `ask` (answered
by a client). Each effect writes a row to a SQLite downstream in `WAYPOINT_TORTURE_DIR`:
`check` counts the rows per effect key, and the promises (`waypoint._torture.promises`) read
when each effect was written and what each read returned when. In a `moving` scenario the
world moves: `lookup` quotes a price that rises every `PRICE_PERIOD`, so a stale read differs
from its re-read; `survey` is a slow read, for `turn` replies that mix it with fresh ones; the
`spec` build changes the prompt, the policy, the limits and every tool's description, so a
replan meets a changed build. A `slow_thread` fault writes from a thread
(`asyncio.to_thread`) after the tool's timeout, as a user's blocking client would. `errand`
runs a sub-agent that pays; `bank_transfer` is the test MCP server's transfer
(`tests/mcp_server.py`, its rows in `mcp.db`), reconciled by the server's `find_transfer`.
The scenario's faults for a call (by its `ref`) fire once across
worker processes, and `WAYPOINT_TORTURE_BUILD` names the deploy the worker runs. A `signed`
scenario's agent accepts signed decisions only.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sqlite3
import sys
import time
from collections import Counter
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

from pydantic import BaseModel, Field

from waypoint._agent import Agent
from waypoint._client_tools import client_tool
from waypoint._content import search_result
from waypoint._tools import ToolContext, tool
from waypoint._torture.scenario import Scenario
from waypoint.mcp import MCPServer
from waypoint.mcp import effect as mcp_effect
from waypoint.protocol import Limits, ModelSettings
from waypoint.protocol.policy import ApprovalPolicy, Rule

NAME = "torture"
MODEL = "claude-sonnet-4-6"
SLOW_SECONDS = 4.0
"""How long a `slow` downstream takes: more than the runner's tool heartbeat timeout."""
LOOKUP_HOLDS = timedelta(seconds=2)
"""`lookup`'s `fresh_for` in a `fresh` scenario: an effect after a kill, an outage or a slow
approval reads it again."""
PRICE_PERIOD = 3.0
"""Seconds between the quote's rises in a `moving` scenario: a re-read after a wait may differ."""
SURVEY_SECONDS = 4.5
"""How long `survey`, the slow read, takes: beside a fresh read in one `turn` reply, the turn
ends that long after the fresh read did."""
SYSTEM = "You run the torture test's errands."
SPEC_POLICY = ApprovalPolicy(rules=[Rule(action="ask", tool="ship", name="ship asks")])
"""The policy of a scenario that deploys the `spec` build: its run's own rule asks for `ship`;
the `spec` build drops it (default allow), which a replan must not adopt."""
SPEC_LIMITS = Limits(max_turns=3, max_tokens_per_call=1024)
"""The `spec` build's limits, which a replan must not adopt either."""
CHILD = "torture_errand"
CHILD_SYSTEM = "You run one errand of the torture test, as a sub-agent."
EFFECT_TOOLS = {"ship", "pay", "transfer", "bank_transfer"}
"""Its effect tools, the MCP server's transfer among them: what the invariants count."""


class Downstream:
    """The outside world: one row per effect that happened, counted by effect key."""

    def __init__(self, path: Path) -> None:
        self.path = path
        with self._db() as db:
            db.execute("CREATE TABLE IF NOT EXISTS effects (effect_key TEXT, ref TEXT, tool TEXT)")
            db.execute("CREATE TABLE IF NOT EXISTS attempts (effect_key TEXT, ref TEXT)")
            db.execute("CREATE TABLE IF NOT EXISTS written (effect_key TEXT, at REAL)")
            db.execute(
                "CREATE TABLE IF NOT EXISTS reads (workflow_id TEXT, run_id TEXT, step_id TEXT, "
                "tool TEXT, city TEXT, value TEXT, ended REAL)"
            )

    def _db(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path, timeout=30)

    def write(self, key: str, ref: str, tool: str, dedupe: bool) -> None:
        """Make the effect happen; `dedupe`: the system ignores a key it has seen."""
        with self._db() as db:
            db.execute("INSERT INTO attempts VALUES (?, ?)", (key, ref))
            if dedupe:
                db.execute(
                    "INSERT INTO effects SELECT ?, ?, ? WHERE NOT EXISTS "
                    "(SELECT 1 FROM effects WHERE effect_key = ?)",
                    (key, ref, tool, key),
                )
            else:
                db.execute("INSERT INTO effects VALUES (?, ?, ?)", (key, ref, tool))
            db.execute("INSERT INTO written VALUES (?, ?)", (key, time.time()))

    def read(self, ctx: ToolContext, tool: str, city: str, value: str) -> None:
        """Note a read's answer and when it returned (a crash may run a read again)."""
        with self._db() as db:
            db.execute(
                "INSERT INTO reads VALUES (?, ?, ?, ?, ?, ?, ?)",
                (ctx.workflow_id, ctx.run_id, ctx.step_id, tool, city, value, time.time()),
            )

    def reads(self) -> list[tuple[str, str, str, str, str, str, float]]:
        """Every read noted: workflow id, run id, step id, tool, city, value, when it returned."""
        with self._db() as db:
            return list(db.execute("SELECT * FROM reads ORDER BY ended"))

    def written(self) -> dict[str, list[float]]:
        """When each effect key's rows were written (seconds since the epoch)."""
        with self._db() as db:
            out: dict[str, list[float]] = {}
            for key, at in db.execute("SELECT effect_key, at FROM written ORDER BY at"):
                out.setdefault(key, []).append(at)
        return out

    def find(self, key: str) -> dict | None:
        """The effect of this key, if it happened."""
        with self._db() as db:
            row = db.execute(
                "SELECT ref, tool FROM effects WHERE effect_key = ?", (key,)
            ).fetchone()
        return None if row is None else {"done": True, "ref": row[0], "tool": row[1]}

    def counts(self) -> dict[str, int]:
        """Rows per effect key (the MCP server's transfers too): more than one is a double."""
        return dict(Counter(key for key, _ in self.rows()))

    def rows(self) -> list[tuple[str, str]]:
        """(effect key, ref) of every effect that happened, the MCP server's transfers too."""
        with self._db() as db:
            rows = list(db.execute("SELECT effect_key, ref FROM effects"))
        return rows + self._transfers()

    def refs(self) -> dict[str, str]:
        """The effect key each call's effect was written under, by the call's ref."""
        return {ref: key for key, ref in self.rows()}

    def _transfers(self) -> list[tuple[str, str]]:
        """(effect key, ref) of each transfer the MCP server made; the ref is its payee."""
        path = self.path.with_name("mcp.db")
        if not path.exists():
            return []
        with sqlite3.connect(path, timeout=30) as db:
            return list(db.execute("SELECT reference, payee FROM transfers"))


def _fire_once(folder: Path, ref: str) -> bool:
    """True the first time a ref's fault is asked about, in any process."""
    try:
        os.close(os.open(folder / f"fired-{ref}", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


class AddArgs(BaseModel):
    """Two integers to add."""

    a: int
    b: int


class LookupArgs(BaseModel):
    """A city to look up."""

    city: str


class LookupArgsV2(BaseModel):
    """A city to look up, as a deploy changed it."""

    city: str
    country: str = Field(default="", description="Added by a deploy: the schema changed.")


class EffectArgs(BaseModel):
    """An errand with an effect, named by the caller's ref."""

    ref: str = Field(description="The caller's reference for this errand.")
    amount: int = Field(gt=0)


class AskArgs(BaseModel):
    """A question for the requester."""

    question: str


class AskAnswer(BaseModel):
    """The requester's answer."""

    answer: str


def agents(folder: Path | None = None, build: str | None = None) -> list[Agent]:
    """The torture agent of the scenario in `folder`, as `build` has it.

    A worker passes neither: they are read from `WAYPOINT_TORTURE_DIR` and
    `WAYPOINT_TORTURE_BUILD`; the driver's `deploy_check` passes the running worker's.
    """
    folder = folder or Path(os.environ["WAYPOINT_TORTURE_DIR"])
    build = os.environ.get("WAYPOINT_TORTURE_BUILD", "") if build is None else build
    scenario = Scenario.load(folder / "scenario.json")
    downstream = Downstream(folder / "downstream.db")
    faults = {c.ref: c.fault for c in scenario.calls() if c.fault}
    holds = LOOKUP_HOLDS if scenario.fresh else None
    changed = build == "spec"
    started = _world_start(folder)

    def said(text: str) -> str:
        return f"{text} (build spec)" if changed else text

    async def effect(tool_name: str, args: EffectArgs, ctx: ToolContext, dedupe: bool) -> dict:
        assert ctx.effect_key
        fault = faults.get(args.ref, "")
        fires = bool(fault) and _fire_once(folder, args.ref)
        if fires and fault == "kill_before_commit":
            os.kill(os.getpid(), signal.SIGKILL)
        if fires and fault == "slow":
            await asyncio.sleep(SLOW_SECONDS)
        if fires and fault == "slow_thread":  # as a user's blocking client: no timeout stops it
            await asyncio.to_thread(
                _slowly, downstream.write, ctx.effect_key, args.ref, tool_name, dedupe
            )
        else:
            downstream.write(ctx.effect_key, args.ref, tool_name, dedupe)
        if fires and fault == "kill_after_commit":
            os.kill(os.getpid(), signal.SIGKILL)
        if fires and fault == "drop_after_commit":
            raise TimeoutError("the downstream took the errand but its reply was lost")
        return {"done": True, "ref": args.ref}

    async def find(args: EffectArgs, ctx: ToolContext) -> dict | None:
        assert ctx.effect_key
        return downstream.find(ctx.effect_key)

    @tool("pure")
    async def add(args: AddArgs) -> int:
        """Add two integers."""
        return args.a + args.b

    description = "Look a city up." if build != "description" else "Look a city up, politely."
    description = said(description)

    def quote(city: str, ctx: ToolContext) -> str:
        moved = int((time.time() - started) // PRICE_PERIOD) if scenario.moving else 0
        price = 100 + 20 * moved
        found = f"fine in {city}, quoted at {price}"
        downstream.read(ctx, "lookup", city, found)
        return found

    if build == "schema":

        @tool("read", name="lookup", description=description, fresh_for=holds)
        async def lookup(args: LookupArgsV2, ctx: ToolContext) -> str:  # pyright: ignore[reportRedeclaration]
            return quote(args.city, ctx)

    else:

        @tool("read", name="lookup", description=description, fresh_for=holds)
        async def lookup(args: LookupArgs, ctx: ToolContext) -> list[object]:
            # A citable search result, so every read meets kills, compaction and corrections.
            found = quote(args.city, ctx)
            return [found, search_result(f"https://weather.example/{args.city}", args.city, found)]

    @tool("read", description=said("Survey a city, slowly."), timeout=timedelta(seconds=20))
    async def survey(args: LookupArgs, ctx: ToolContext) -> str:
        await asyncio.sleep(SURVEY_SECONDS)
        found = f"surveyed {args.city}"
        downstream.read(ctx, "survey", args.city, found)
        return found

    @tool("effect", idempotent=True, description=said("Ship a parcel."))
    async def ship(args: EffectArgs, ctx: ToolContext) -> dict:
        """Ship a parcel; the carrier deduplicates on the effect key."""
        return await effect("ship", args, ctx, dedupe=True)

    @tool("effect", reconcile=find, description=said("Pay."))
    async def pay(args: EffectArgs, ctx: ToolContext) -> dict:
        """Pay; the bank does not deduplicate, so a crash is reconciled by key."""
        return await effect("pay", args, ctx, dedupe=False)

    @tool("effect", reconcile=find, requires_approval=True, description=said("Transfer money."))
    async def transfer(args: EffectArgs, ctx: ToolContext) -> dict:
        """Transfer money; a person approves each call."""
        return await effect("transfer", args, ctx, dedupe=False)

    ask = client_tool("ask", AskArgs, AskAnswer, description=said("Ask the requester."))
    kinds = {c.kind for c in scenario.calls()}
    child = Agent(name=CHILD, model=MODEL, system=CHILD_SYSTEM, tools=[pay])
    errand = child.as_tool(
        name="errand", description=said("Run an errand through a helper."), input_type=EffectArgs
    )
    thinking = any(r.kind == "thinking" for r in scenario.replies)
    spec_deployed = any(a.kind == "deploy_spec" for a in scenario.actions)
    return [
        Agent(
            name=NAME,
            model=MODEL,
            system=SYSTEM + {"prompt": " Be brief.", "spec": " Replanned."}.get(build, ""),
            tools=[add, lookup, survey, ship, pay, transfer, ask, errand],
            mcp=[_bank(folder)] if "mcp" in kinds else [],
            on_change=scenario.on_change,  # type: ignore[arg-type]
            settings=ModelSettings(thinking="adaptive" if thinking else "off"),
            signed_decisions=scenario.signed,
            policy=SPEC_POLICY if spec_deployed and not changed else None,
            limits=SPEC_LIMITS if changed else Limits(),
        )
    ]


def _world_start(folder: Path) -> float:
    """When the scenario's world began (its first worker's start): the quote rises from it."""
    path = folder / "world-start"
    with contextlib.suppress(FileExistsError):
        with path.open("x") as f:
            f.write(repr(time.time()))
    return float(path.read_text() or time.time())


def _slowly(
    write: Callable[[str, str, str, bool], None], key: str, ref: str, tool: str, dedupe: bool
) -> None:
    """The write of a blocking downstream client, `SLOW_SECONDS` late."""
    time.sleep(SLOW_SECONDS)
    write(key, ref, tool, dedupe)


TRANSFER = mcp_effect(
    idempotency_argument="reference",
    reconcile_tool="find_transfer",
    timeout=timedelta(seconds=30),  # a fresh worker's first call also starts the server
)


def _bank(folder: Path) -> MCPServer:
    """The test MCP server (a checkout's `tests/mcp_server.py`) over stdio, its rows in mcp.db."""
    root = Path(__file__).resolve().parents[2]
    return MCPServer.stdio(
        "bank",
        sys.executable,
        ["-m", "tests.mcp_server", "stdio", str(folder / "mcp.db")],
        env={"PYTHONPATH": str(root)},
        cwd=str(root),
        prefix="bank_",
        tools={"transfer": TRANSFER},
    )
