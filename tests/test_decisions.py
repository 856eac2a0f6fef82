"""Decisions a person sends: counted once by their id, signed when the agent asks for it, and
never let past an ask by a number that has no order."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path

from pydantic import BaseModel
from temporalio.client import Client

from tests.agents import Payments
from tests.conftest import running_worker
from tests.fake_messages_api import FakeMessagesAPI, text, tool_use
from tests.test_claude_run import claude
from waypoint.agent import Agent
from waypoint.models import ModelSettings
from waypoint.policy import ApprovalPolicy, Condition, Rule
from waypoint.runs import start_run
from waypoint.tools import ToolContext, tool

# --- NaN and infinity against ordered policy rules --------------------------------------------


def test_a_nan_argument_matches_ask_and_deny_rules_but_never_allow() -> None:
    ask_big = ApprovalPolicy(
        rules=[Rule(tool="pay", action="ask", when=[Condition(field="tip", op="gt", value=50)])],
        default="allow",
    )
    allow_small = ApprovalPolicy(
        rules=[Rule(tool="pay", action="allow", when=[Condition(field="tip", op="lt", value=5)])],
        default="ask",
    )
    for odd in (math.nan, math.inf, -math.inf):
        asked = ask_big.decide("pay", "effect", {"tip": odd})
        assert asked is not None and asked.action == "ask", odd
        fallback = allow_small.decide("pay", "effect", {"tip": odd})
        assert fallback is not None and fallback.by == "policy: default ask", odd


def test_a_policy_threshold_must_be_a_finite_number() -> None:
    for odd in (math.nan, math.inf):
        try:
            Condition(field="tip", op="gt", value=odd)
        except ValueError as err:
            assert "finite" in str(err)
        else:
            raise AssertionError(f"a {odd} threshold was accepted")


class Tipped(BaseModel):
    payee: str
    tip: float | None = None


async def test_a_nan_from_the_model_is_refused_not_run_past_an_ask_rule(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """JSON has no NaN, but parsers accept it; at the Temporal boundary it would become null,
    which no threshold matches, and the payment would run with no one asked."""
    payments = Payments(tmp_path / "p.db")

    @tool("effect", idempotent=True)
    async def pay(args: Tipped, ctx: ToolContext) -> dict:
        """Pay someone, with a tip."""
        assert ctx.effect_key
        return payments.pay(ctx.effect_key, args.payee, int(args.tip or 0))

    agent = Agent(
        name="payer",
        model="claude-sonnet-4-6",
        system="You pay people.",
        tools=[pay],
        policy=ApprovalPolicy(
            rules=[
                Rule(tool="pay", action="ask", when=[Condition(field="tip", op="gt", value=50)])
            ],
            default="allow",
        ),
        settings=ModelSettings(cache="off"),
    )
    with FakeMessagesAPI() as api:
        api.enqueue_message(tool_use("pay", {"payee": "ada", "tip": math.nan}))
        api.enqueue_message(text("Could not pay."))
        async with running_worker(
            client, [agent], task_queue, use_anthropic=True, anthropic=claude(api)
        ):
            handle = await start_run(client, "payer", "pay ada", task_queue=task_queue)
            result = await asyncio.wait_for(handle.result(), 60)
        second = api.message_requests[1].body["messages"][-1]["content"][0]
    assert payments.count() == 0
    step = next(r for r in result.ledger if r.step_id == "t1.tool.1.pay")
    assert step.status == "error" and "non-finite number at tip" in step.summary
    assert second["is_error"] and "send a finite number" in str(second["content"])
