"""The travel desk a new user wrote from the docs (issue 53), in small: its shapes, for tests.

`travel` reads fares (`fresh_for`) and the travel policy (a plain `def` that sleeps, as a
slow lookup does), has a sub-agent, `booker`, hold a seat (an effect, its typed task read with
`task_as`), then charges the card, an effect a manager approves, on a downstream that does not
deduplicate: each charge is a new row with a new id. The typed result holds the hold's and the
charge's ids, which differ run to run, so a kill test compares it by fields. A rejected charge
ends the run with `status="rejected"`. Everything lives in `$TRAVEL_DIR` (`travel.db`; the
`fares` file's price, read on every call, so a test can change it between reads; `in-policy`,
which the policy lookup touches as it starts sleeping once `arm-policy` exists).
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from datetime import timedelta
from pathlib import Path

from pydantic import BaseModel

from waypoint._agent import Agent
from waypoint._tools import ToolContext, tool
from waypoint.protocol import ModelRequest, ModelResponse, text_of
from waypoint.testing import (
    final_answer,
    latest_result,
    read_again,
    reply,
    result_json,
    task_as,
    tool_use,
)

MODEL = "claude-sonnet-4-6"
ROUTE = "LIS-BER"


class Route(BaseModel):
    """A route to price."""

    route: str


class Traveller(BaseModel):
    """Whose travel policy to read."""

    traveller: str


class Booking(BaseModel):
    """A seat to hold: the booker's task, from the travel agent's call."""

    route: str
    fare_cents: int


class Charge(BaseModel):
    """A card charge for a held seat."""

    hold_id: str
    cents: int


class Hold(BaseModel):
    """What the booker answers."""

    hold_id: str


class Trip(BaseModel):
    """The travel desk's typed result: the downstream's ids are in it."""

    route: str
    fare_cents: int
    status: str
    hold_id: str
    charge_id: str | None = None


def folder() -> Path:
    """Where the app keeps its downstream: `$TRAVEL_DIR`."""
    return Path(os.environ["TRAVEL_DIR"])


def _db() -> sqlite3.Connection:
    db = sqlite3.connect(folder() / "travel.db", timeout=30)
    db.execute("CREATE TABLE IF NOT EXISTS holds (effect_key TEXT, route TEXT)")
    db.execute("CREATE TABLE IF NOT EXISTS charges (effect_key TEXT, cents INTEGER)")
    return db


def count_effects(key: str) -> int:
    """Rows under exactly this key, holds and charges: no key is deduplicated downstream."""
    with _db() as db:
        holds = db.execute("SELECT COUNT(*) FROM holds WHERE effect_key = ?", (key,)).fetchone()
        charges = db.execute("SELECT COUNT(*) FROM charges WHERE effect_key = ?", (key,))
        return holds[0] + charges.fetchone()[0]


def _row(table: str, key: str | None) -> str | None:
    with _db() as db:
        found = db.execute(f"SELECT rowid FROM {table} WHERE effect_key = ?", (key,)).fetchone()
    return None if found is None else f"{table[0].upper()}-{found[0]}"


def _insert(table: str, key: str | None, value: object) -> str:
    with _db() as db:
        done = db.execute(f"INSERT INTO {table} VALUES (?, ?)", (key, value))
    return f"{table[0].upper()}-{done.lastrowid}"


@tool("read", fresh_for=timedelta(minutes=10))
def fares(args: Route) -> dict:
    """Today's fare for a route (the price is whatever the `fares` file says now)."""
    price = folder() / "fares"
    return {"route": args.route, "cents": int(price.read_text()) if price.exists() else 12000}


@tool("read")
def policy(args: Traveller) -> str:
    """The traveller's travel policy: a slow lookup, a plain `def` that blocks."""
    if (folder() / "arm-policy").exists():  # a kill test's hook: it kills during the sleep
        (folder() / "in-policy").touch()
    time.sleep(0.3)
    return f"{args.traveller} may fly economy within Europe."


async def _held(args: Booking, ctx: ToolContext) -> dict | None:
    hold = _row("holds", ctx.effect_key)
    return None if hold is None else {"hold_id": hold}


@tool("effect", reconcile=_held)
def hold_seat(args: Booking, ctx: ToolContext) -> dict:
    """Hold a seat at the fare (the airline keeps every hold it is sent)."""
    return {"hold_id": _insert("holds", ctx.effect_key, args.route)}


async def _charged(args: Charge, ctx: ToolContext) -> dict | None:
    charge = _row("charges", ctx.effect_key)
    return None if charge is None else {"charge_id": charge}


@tool("effect", reconcile=_charged, requires_approval=True)
def charge_card(args: Charge, ctx: ToolContext) -> dict:
    """Charge the company card (the bank does not deduplicate: every call is a charge)."""
    return {"charge_id": _insert("charges", ctx.effect_key, args.cents)}


def _fare(request: ModelRequest) -> int:
    """The newest fare: a refresh's, when the fare was read again and had changed."""
    again = read_again(request, "fares")
    return int(
        json.loads(again)["cents"]
        if again
        else result_json(latest_result(request, "fares"))["cents"]
    )


def _next(request: ModelRequest) -> ModelResponse:
    """Book, charge, answer: each turn does what the results so far call for.

    A booking refused because the fare changed is made again at the new fare; a charge the
    manager rejected ends the trip `rejected`.
    """
    booked = latest_result(request, "book")
    if booked is None or booked.is_error:
        return reply(tool_use("book", route=ROUTE, fare_cents=_fare(request)))
    held = result_json(booked)["hold_id"]
    charged = latest_result(request, "charge_card")
    if charged is None:
        return reply(tool_use("charge_card", hold_id=held, cents=_fare(request)))
    status, charge_id = "charged", None
    if charged.is_error:
        status = "rejected" if "rejected" in text_of(charged.content) else "not charged"
    else:
        charge_id = result_json(charged)["charge_id"]
    trip = Trip(route=ROUTE, fare_cents=_fare(request), status=status, hold_id=held)
    return reply(final_answer(trip.model_copy(update={"charge_id": charge_id})))


def _hold(request: ModelRequest) -> ModelResponse:
    booking = task_as(request, Booking)  # the travel agent's call, as the booker's task
    return reply(tool_use("hold_seat", route=booking.route, fare_cents=booking.fare_cents))


def _held_answer(request: ModelRequest) -> ModelResponse:
    return reply(final_answer(Hold(**result_json(latest_result(request, "hold_seat")))))


def agents() -> list[Agent]:
    """The travel agent and its booker."""
    booker = Agent(
        name="booker",
        model=MODEL,
        system="Hold seats.",
        tools=[hold_seat],
        output_type=Hold,
        script=[_hold, _held_answer],
    )
    book = booker.as_tool(name="book", description="Hold a seat.", input_type=Booking)
    travel = Agent(
        name="travel",
        model=MODEL,
        system="Book trips within policy.",
        tools=[fares, policy, book, charge_card],
        output_type=Trip,
        script=[
            reply(tool_use("fares", route=ROUTE), tool_use("policy", traveller="ada")),
            *[_next] * 5,
        ],
    )
    return [travel, booker]
