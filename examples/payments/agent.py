"""The payer agent: checks the balance, pays (with approval above 100.00), reports.

Offline it plays `SCRIPT`: fixed replies, and functions that read what the tools returned.
"""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta

from pydantic import BaseModel, Field

from examples.payments.bank import Bank
from waypoint import Agent, Limits, ToolContext, tool
from waypoint.testing import (
    ModelRequest,
    ModelResponse,
    last_tool_results,
    reply,
    text,
    text_of,
    tool_use,
)

bank = Bank.from_env()


class BalanceArgs(BaseModel):
    """What `balance` takes; Claude reads its JSON schema."""

    account: str = Field(description="The account to look up, e.g. operating")


class PayArgs(BaseModel):
    """What `pay` takes."""

    payee: str = Field(description="Who to pay")
    amount_cents: int = Field(gt=0)


@tool("read")
async def balance(args: BalanceArgs) -> dict:
    """Look up an account's balance in cents."""  # the docstring is what Claude reads
    cents = await asyncio.to_thread(bank.balance, args.account)
    return {"account": args.account, "balance_cents": cents}


@tool(
    "effect",
    requires_approval=lambda args: args.amount_cents > 100_00,
    timeout=timedelta(seconds=30),
    max_attempts=2,
)
async def pay(args: PayArgs, ctx: ToolContext) -> dict:
    """Pay someone from the operating account."""
    assert ctx.effect_key  # effect tools always get one
    return await asyncio.to_thread(bank.pay, ctx.effect_key, args.payee, args.amount_cents)


@pay.reconcile
async def find_payment(args: PayArgs, ctx: ToolContext) -> dict | None:
    """Did this payment already happen? Its record, or None; raises if the bank cannot say."""
    assert ctx.effect_key
    return await asyncio.to_thread(bank.find_payment, ctx.effect_key)


def pay_if_covered(request: ModelRequest) -> ModelResponse:
    """Turn 2: pay only if the balance the tool returned covers the invoice."""
    (looked_up,) = last_tool_results(request)
    if looked_up.is_error:
        return reply(text(f"I could not read the balance: {text_of(looked_up.content)}"))
    if json.loads(text_of(looked_up.content))["balance_cents"] < 250_00:
        return reply(text("The operating account cannot cover invoice 7."))
    return reply(text("Paying invoice 7."), tool_use("pay", payee="ACME", amount_cents=250_00))


def report(request: ModelRequest) -> ModelResponse:
    """Turn 3: say what the payment step returned (a rejection comes back as an error)."""
    (paid,) = last_tool_results(request)
    if paid.is_error:
        return reply(text(f"Invoice 7 is not paid: {text_of(paid.content)}"))
    return reply(text("Paid ACME 250.00 for invoice 7."))


SCRIPT = [
    reply(text("Checking the balance first."), tool_use("balance", account="operating")),
    pay_if_covered,
    report,
]


def agents() -> list[Agent]:
    """What `waypoint worker --app examples.payments:agents` serves."""
    return [
        Agent(
            name="payer",
            model="claude-sonnet-4-6",
            system="You pay invoices from the operating account. Check the balance first.",
            tools=[balance, pay],
            limits=Limits(max_turns=20, max_cost_usd=2.0),
            script=SCRIPT,  # played when the worker has no Claude credentials
        )
    ]
