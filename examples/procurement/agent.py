"""`build_agents`: the buyer, its supplier-check sub-agent, the catalogue server and the policy."""

from __future__ import annotations

import os
import sys
from datetime import timedelta
from pathlib import Path

from examples.procurement.script import CHECKER_SCRIPT, SCRIPT
from examples.procurement.tools import (
    SupplierCheckArgs,
    SupplierVerdict,
    ask_requester,
    checker_tools,
    place_order_tool,
)
from waypoint import Agent
from waypoint.demo.barriers import Barriers
from waypoint.mcp import MCPServer, MCPToolClass
from waypoint.protocol.policy import ApprovalPolicy, Condition, Rule
from waypoint.testing import Script

NAME = "procurement"
CHECKER = "supplier_check"
DEFAULT_MODEL = "claude-sonnet-4-6"
TASK = "Order 12 standing desks for the Lisbon office."
SANCTIONED_TASK = "Order 2 industrial pumps for the Tabriz plant."
ANSWER = {"confirmed": True, "quantity": 12, "deliver_by": "2026-03-31"}
"""The requester's answer to `ask_requester` for TASK (the kill test sends it)."""
CATALOGUE_DB = "catalogue.sqlite3"
ROOT = Path(__file__).resolve().parent.parent.parent

SANCTIONED_COUNTRIES = ["BY", "CU", "IR", "KP", "RU", "SY", "VE"]
POLICY = ApprovalPolicy(
    rules=[
        Rule(
            tool="place_order",
            action="deny",
            when=[Condition(field="supplier_country", op="in", value=SANCTIONED_COUNTRIES)],
            name="deny sanctioned countries",
        ),
        Rule(
            tool="place_order",
            action="ask",
            when=[Condition(field="total_eur", op="gt", value=1000)],
            name="ask above 1,000 EUR",
        ),
        Rule(kind="read", action="allow", name="allow reads"),
    ]
)
"""The team's rules: the supplier check screens names; the policy refuses the countries."""

SYSTEM = """\
You buy what a requester asks for from the supplier catalogue. Use only the tools, in order:
1. search_catalogue for the item, then get_item on the best match.
2. check_supplier on the item's supplier and country; if it does not approve, stop and say why.
3. ask_requester to confirm the quantity and the latest delivery date; if they decline, stop.
4. place_order with the confirmed quantity, the catalogue's unit price and their product as
   total_eur. Orders above 1,000 EUR wait for a person's approval; orders to sanctioned
   countries are denied by policy. Never retry a denied or rejected order.
5. Finish with one sentence: what was ordered, from whom, for how much, by when.
"""

CHECKER_SYSTEM = """\
You check a supplier before the company orders from it. Call lookup_registry and
screen_sanctions together, then record_check with your verdict (approved only if the supplier
is registered and its name matches nothing on the sanctions list) and a one-line reason, then
give your final answer.
"""

_READ = MCPToolClass("read", timeout=timedelta(seconds=30))
"""A fresh worker's first call also opens the stdio session: more than a kill test's 2 s."""


def folder_from_env() -> Path:
    """The downstream folder: `$WAYPOINT_PROCUREMENT_DIR`, else `.waypoint/procurement`."""
    return Path(os.environ.get("WAYPOINT_PROCUREMENT_DIR") or ".waypoint/procurement").absolute()


def catalogue_server(folder: Path) -> MCPServer:
    """The catalogue's MCP server, started by the worker over stdio, seeding `folder`."""
    return MCPServer.stdio(
        "catalogue",
        sys.executable,
        ["-m", "examples.procurement.catalogue_server", str(folder / CATALOGUE_DB)],
        env={"PYTHONPATH": str(ROOT)},
        cwd=str(ROOT),
        tools={"search_catalogue": _READ, "get_item": _READ},
    )


def build_agents(
    folder: Path | None = None,
    *,
    barrier_dir: Path | None = None,
    model: str | None = None,
    script: Script = SCRIPT,
    checker_script: Script = CHECKER_SCRIPT,
) -> tuple[Agent, Agent]:
    """The buyer and its supplier check, over one downstream folder.

    Args:
        folder: Where the catalogue, the purchase orders and the check log live; defaults to
            `$WAYPOINT_PROCUREMENT_DIR`, else `.waypoint/procurement`.
        barrier_dir: Crash-test barriers for the effect tools; defaults to
            `$WAYPOINT_DEMO_BARRIER_DIR`, else none.
        model: Claude model id; defaults to `$WAYPOINT_DEMO_MODEL`, else `claude-sonnet-4-6`.
        script: The buyer's offline script.
        checker_script: The supplier check's offline script.
    """
    folder = (folder or folder_from_env()).absolute()
    barrier = os.environ.get("WAYPOINT_DEMO_BARRIER_DIR")
    barriers = Barriers(barrier_dir or (Path(barrier).absolute() if barrier else None))
    model = model or os.environ.get("WAYPOINT_DEMO_MODEL") or DEFAULT_MODEL
    checker = Agent(
        name=CHECKER,
        model=model,
        system=CHECKER_SYSTEM,
        tools=checker_tools(folder, barriers),
        output_type=SupplierVerdict,
        script=checker_script,
    )
    buyer = Agent(
        name=NAME,
        model=model,
        system=SYSTEM,
        tools=[
            checker.as_tool(
                name="check_supplier",
                description="Check a supplier (registry, sanctions) before ordering from it.",
                input_type=SupplierCheckArgs,
                output_type=SupplierVerdict,
            ),
            ask_requester(),
            place_order_tool(folder, barriers),
        ],
        mcp=[catalogue_server(folder)],
        policy=POLICY,
        script=script,
    )
    return buyer, checker
