"""The agents a worker subprocess runs in CLI and kill tests (`--app tests.cli_app:agents`)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from pydantic import BaseModel

from tests.agents import PAY_SCRIPT, Payments, build_agent, with_changed_pay
from waypoint._agent import Agent
from waypoint._tools import ToolContext, tool
from waypoint.testing import reply, text, tool_use


def agents() -> list[Agent]:
    """The payer agent, paying into the SQLite file named by WAYPOINT_TEST_PAYMENTS."""
    payments = Payments(Path(os.environ["WAYPOINT_TEST_PAYMENTS"]))
    return [build_agent(payments, PAY_SCRIPT, approval=True)]


def changed_agents() -> list[Agent]:
    """The payer after a deploy that changed its pay tool's schema (`on_change="refuse"`)."""
    payments = Payments(Path(os.environ["WAYPOINT_TEST_PAYMENTS"]))
    return [with_changed_pay(build_agent(payments, PAY_SCRIPT), payments, "refuse")]


class WaitArgs(BaseModel):
    name: str


def fanout_agents() -> list[Agent]:
    """An agent whose one reply fans out to three tools; two hold while `$FANOUT_HOLD` exists."""
    hold = Path(os.environ["FANOUT_HOLD"])
    payments = Payments(Path(os.environ["WAYPOINT_TEST_PAYMENTS"]))

    @tool("read")
    async def fast(args: WaitArgs) -> str:
        """Answer at once."""
        return f"fast {args.name}"

    @tool("effect", idempotent=True)
    async def slow_pay(args: WaitArgs, ctx: ToolContext) -> dict:
        """Pay, slowly: waits while the hold file exists."""
        while hold.exists():
            await asyncio.sleep(0.05)
        assert ctx.effect_key
        return payments.pay(ctx.effect_key, args.name, 1)

    script = [
        reply(
            tool_use("fast", name="a"),
            tool_use("slow_pay", name="b"),
            tool_use("slow_pay", name="c"),
        ),
        reply(text("fanned out")),
    ]
    return [
        Agent(
            name="fanout",
            model="claude-sonnet-4-6",
            system="fan out",
            tools=[fast, slow_pay],
            script=script,
        )
    ]
