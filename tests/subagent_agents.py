"""A buyer agent that delegates a supplier check (which pays a deposit) to a sub-agent.

Both pay into one real SQLite table unique on the effect key; the sub-agent's key extends the
buyer's step key, so `count_under(key)` counts every payment a step caused, its child's included.
`agents()` builds them from the environment for worker subprocesses (kill tests).
"""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

from pydantic import BaseModel, Field

from tests.agents import Payments
from waypoint._agent import Agent
from waypoint._tools import ToolContext, tool
from waypoint.demo.barriers import Barriers
from waypoint.protocol import Limits, ModelRequest, ModelResponse, text_of
from waypoint.testing import Script, final_answer, last_tool_results, reply, text, tool_use


class CheckArgs(BaseModel):
    """What the buyer asks the checker."""

    supplier: str
    deposit: int = Field(gt=0)


class CheckResult(BaseModel):
    """The checker's typed answer."""

    supplier: str
    approved: bool
    deposit_paid: int


class PayArgs(BaseModel):
    payee: str
    amount: int = Field(gt=0)


def count_under(db: Path, key: str) -> int:
    """Payments made under a step's key: the step's own and every sub-agent step's below it."""
    with sqlite3.connect(db) as conn:
        return conn.execute(
            "SELECT COUNT(*) FROM payments WHERE effect_key = ? OR effect_key LIKE ?",
            (key, f"{key}/%"),
        ).fetchone()[0]


def keys(db: Path) -> list[str]:
    """Every effect key in the payments table."""
    with sqlite3.connect(db) as conn:
        return [r[0] for r in conn.execute("SELECT effect_key FROM payments ORDER BY 1")]


def pay_tool(payments: Payments, barriers: Barriers, approval: bool = False):  # type: ignore[no-untyped-def]
    """An effect that commits, then may stop at the `after_commit.pay` barrier (kill tests)."""

    @tool("effect", requires_approval=approval)
    async def pay(args: PayArgs, ctx: ToolContext) -> dict:
        """Pay someone."""
        assert ctx.effect_key
        row = payments.pay(ctx.effect_key, args.payee, args.amount)
        barriers.check("after_commit", "pay")
        return row

    @pay.reconcile
    async def _find(args: PayArgs, ctx: ToolContext) -> dict | None:
        assert ctx.effect_key
        return payments.find(ctx.effect_key)

    return pay


def _checker_pays(request: ModelRequest) -> ModelResponse:
    task = json.loads(text_of(request.messages[0].content))
    return reply(tool_use("pay", payee=task["supplier"], amount=task["deposit"]))


def _checker_answers(request: ModelRequest) -> ModelResponse:
    paid = json.loads(text_of(last_tool_results(request)[0].content))
    answer = CheckResult(supplier=paid["payee"], approved=True, deposit_paid=paid["amount"])
    return reply(final_answer(answer))


CHECKER_SCRIPT: Script = [_checker_pays, _checker_answers]


def _buyer_reports(request: ModelRequest) -> ModelResponse:
    results = [text_of(r.content) for r in last_tool_results(request)]
    return reply(text(f"Bought. Check: {results[0]}"))


BUYER_SCRIPT: Script = [
    reply(text("Checking the supplier."), tool_use("check_supplier", supplier="acme", deposit=7)),
    _buyer_reports,
]


def build_agents(
    db: Path,
    *,
    barrier_dir: Path | None = None,
    buyer_script: Script = BUYER_SCRIPT,
    checker_script: Script = CHECKER_SCRIPT,
    approval: bool = False,
    child_approval: bool = False,
    limits: Limits | None = None,
) -> tuple[Agent, Agent]:
    """The buyer and its sub-agent, over one payments table."""
    payments = Payments(db)
    barriers = Barriers(barrier_dir)
    checker = Agent(
        name="checker",
        model="claude-sonnet-4-6",
        system="You check a supplier and pay its deposit.",
        tools=[pay_tool(payments, barriers, child_approval)],
        script=checker_script,
        output_type=CheckResult,
    )
    buyer = Agent(
        name="buyer",
        model="claude-sonnet-4-6",
        system="You buy from suppliers after a check.",
        tools=[
            checker.as_tool(
                name="check_supplier",
                description="Check a supplier and pay its deposit.",
                input_type=CheckArgs,
                output_type=CheckResult,
                requires_approval=approval,
            )
        ],
        script=buyer_script,
        limits=limits or Limits(),
    )
    return buyer, checker


def agents() -> list[Agent]:
    """For `waypoint worker --app tests.subagent_agents:agents` (kill tests)."""
    env = os.environ
    barrier = env.get("WAYPOINT_DEMO_BARRIER_DIR")
    buyer, _ = build_agents(
        Path(env["WAYPOINT_SUB_DB"]), barrier_dir=Path(barrier) if barrier else None
    )
    return [buyer]  # the worker adds the sub-agent itself
