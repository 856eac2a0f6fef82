"""An agent whose run carries canary secrets everywhere: task, tool arguments, results, errors.

Run by a worker subprocess in `test_encryption_at_rest.py`; its downstream is a SQLite file
named by `CANARY_DB`.
"""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import BaseModel

from tests.agents import Payments
from waypoint._agent import Agent
from waypoint._tools import ToolContext, tool
from waypoint.testing import reply, text, tool_use

IBAN = "DE89370400440532013000"
VAT = "DE811907980"


class BankArgs(BaseModel):
    iban: str


class PayArgs(BaseModel):
    payee: str
    amount: int


def agents() -> list[Agent]:
    db = Path(os.environ["CANARY_DB"])
    payments = Payments(db)
    tried = db.with_suffix(".tried")

    @tool("read")
    async def lookup_bank(args: BankArgs) -> str:
        """Look up the bank of an IBAN (fails once, naming the IBAN, as banks' errors do)."""
        if not tried.exists():
            tried.write_text("1")
            raise ValueError(f"bank directory timed out looking up {args.iban}")
        return f"{args.iban} belongs to Commerzbank; supplier VAT {VAT}"

    @tool("effect", idempotent=True, requires_approval=True)
    async def pay(args: PayArgs, ctx: ToolContext) -> dict:
        """Pay someone."""
        assert ctx.effect_key
        return payments.pay(ctx.effect_key, args.payee, args.amount)

    script = [
        reply(text(f"Checking {IBAN}."), tool_use("lookup_bank", iban=IBAN)),
        reply(tool_use("pay", payee=IBAN, amount=100)),
        reply(text(f"Paid 100 to {IBAN} (VAT {VAT}).")),
    ]
    return [Agent("canary", "claude-sonnet-4-6", "You pay.", [lookup_bank, pay], script=script)]
