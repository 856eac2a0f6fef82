"""The procurement tools, built over a downstream folder chosen at runtime.

The buyer (`procurement`) asks the requester to confirm with a client-answered tool and places
the purchase order with an effect tool reconciled by its effect key. The supplier check
(`supplier_check`) looks the supplier up in the registry, screens it against the sanctions list
(both `read`) and records its verdict in an audit log (an idempotent effect).

Crash-test hook: given `barrier_dir`, both effect tools honour the barriers
`before_commit.<tool>` and `after_commit.<tool>` (see `waypoint/demo/barriers.py`).
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from examples.procurement import downstream, registry
from waypoint import ClientTool, Tool, ToolContext, client_tool, tool
from waypoint.demo import sanctions
from waypoint.demo.barriers import Barriers

_DATE = r"^\d{4}-\d{2}-\d{2}$"
_COUNTRY = r"^[A-Z]{2}$"


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)


class SupplierCheckArgs(_Args):
    """The supplier to check before anything is ordered from it."""

    supplier: str = Field(min_length=1, description="The supplier's legal name.")
    country: str = Field(pattern=_COUNTRY, description="ISO 3166-1 alpha-2 country code.")


class SupplierVerdict(BaseModel):
    """The supplier check's typed answer."""

    supplier: str
    country: str
    registry_id: str | None
    sanctions_match: bool
    approved: bool
    reason: str


class LookUpArgs(_Args):
    """The company to look up."""

    name: str = Field(min_length=1, description="The company's legal name.")


class ScreenArgs(_Args):
    """The company to screen."""

    company: str = Field(min_length=1, description="The company's legal name.")
    country: str = Field(pattern=_COUNTRY, description="Its country, reported next to matches.")


class RecordCheckArgs(_Args):
    """The verdict to record in the supplier-check audit log."""

    supplier: str = Field(min_length=1)
    country: str = Field(pattern=_COUNTRY)
    verdict: Literal["approved", "blocked"]
    reason: str = Field(min_length=1)


class ConfirmOrder(_Args):
    """Ask the requester to confirm the quantity and the delivery date before ordering."""

    question: str = Field(min_length=1, description="The question, in one sentence.")
    sku: str
    item: str
    proposed_quantity: int = Field(gt=0)
    unit_price_eur: float = Field(gt=0)


class OrderConfirmation(BaseModel):
    """The requester's answer."""

    confirmed: bool
    quantity: int = Field(gt=0)
    deliver_by: str = Field(pattern=_DATE, description="Latest delivery date, YYYY-MM-DD.")
    note: str = ""


class PlaceOrderArgs(_Args):
    """The purchase order; `total_eur` must equal quantity times unit price."""

    sku: str
    supplier: str
    supplier_country: str = Field(pattern=_COUNTRY)
    quantity: int = Field(gt=0)
    unit_price_eur: float = Field(gt=0)
    total_eur: float = Field(gt=0, description="quantity x unit_price_eur, in EUR.")
    deliver_by: str = Field(pattern=_DATE)

    @model_validator(mode="after")
    def _total_adds_up(self) -> PlaceOrderArgs:
        expected = round(self.quantity * self.unit_price_eur, 2)
        if abs(self.total_eur - expected) > 0.005:
            raise ValueError(f"total_eur {self.total_eur} is not quantity x price ({expected})")
        return self


def _key(ctx: ToolContext) -> str:
    if not ctx.effect_key:
        raise ValueError(f"step {ctx.step_id} has no effect key; effect tools need one")
    return ctx.effect_key


def checker_tools(folder: Path, barriers: Barriers) -> list[Tool]:
    """The supplier check's tools; its verdicts go to the audit log in `folder`."""

    @tool("read")
    async def lookup_registry(args: LookUpArgs) -> dict[str, Any]:
        """Look a company up in the company registry: its registry id and country, if found."""
        return registry.look_up(args.name)

    @tool("read")
    async def screen_sanctions(args: ScreenArgs) -> dict[str, Any]:
        """Screen a company's name against the sanctions list."""
        return await asyncio.to_thread(sanctions.screen, args.company, args.country)

    @tool("effect", idempotent=True)
    async def record_check(args: RecordCheckArgs, ctx: ToolContext) -> dict[str, Any]:
        """Record the check's verdict in the supplier-check audit log (once per step)."""
        row = await asyncio.to_thread(
            downstream.record_check,
            folder,
            _key(ctx),
            args.model_dump(),
            barriers.hook("before_commit", "record_check"),
        )
        await asyncio.to_thread(barriers.check, "after_commit", "record_check")
        return row

    return [lookup_registry, screen_sanctions, record_check]


def ask_requester() -> ClientTool:
    """The question to the requester; the run waits, holding no process, for the answer."""
    return client_tool("ask_requester", ConfirmOrder, OrderConfirmation, timeout=timedelta(days=3))


def place_order_tool(folder: Path, barriers: Barriers) -> Tool:
    """The purchase order, written to `folder`; the agent's policy decides who approves it."""

    @tool("effect")
    async def place_order(args: PlaceOrderArgs, ctx: ToolContext) -> dict[str, Any]:
        """Place a purchase order with the supplier (this commits the company to pay)."""
        row = await asyncio.to_thread(
            downstream.place_order,
            folder,
            _key(ctx),
            args.model_dump(),
            barriers.hook("before_commit", "place_order"),
        )
        await asyncio.to_thread(barriers.check, "after_commit", "place_order")
        return row

    @place_order.reconcile
    async def find_order(args: PlaceOrderArgs, ctx: ToolContext) -> dict[str, Any] | None:
        """The order this step placed, or None if there is no row under its key."""
        return await asyncio.to_thread(downstream.find_order, folder, _key(ctx))

    return place_order
