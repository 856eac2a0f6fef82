"""A fare desk whose script reacts to a refresh and to a rejection (docs/testing.md shows it).

`python -m examples.fare_desk` runs it against your server; tests/test_travel_desk.py runs it
on the test server.
"""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from typing import Any

from pydantic import BaseModel
from temporalio.client import Client

from waypoint import Agent, build_worker, connect, tool
from waypoint.client import runs
from waypoint.protocol import ModelRequest, ModelResponse
from waypoint.protocol.events import ApprovalRequested, RunEnded
from waypoint.testing import latest_result, read_again, reply, result_json, text, tool_use

FARE = {"cents": 12000}


class Route(BaseModel):
    """A route to price."""

    route: str


class Seat(BaseModel):
    """A seat to buy at a fare."""

    route: str
    cents: int


@tool("read", fresh_for=timedelta(minutes=10))
async def fares(args: Route) -> dict:
    """Today's fare for a route."""
    return {"route": args.route, **FARE}


@tool("effect", idempotent=True, requires_approval=True)
async def buy(args: Seat) -> dict:
    """Buy the seat (the airline deduplicates on the effect key)."""
    return {"ticket": f"T-{args.cents}"}


def fare(request: ModelRequest) -> int:
    """The newest fare: a refresh's, when the fare was read again and had changed."""
    again = read_again(request, "fares")  # newer than the first result, when it changed
    read = json.loads(again) if again else result_json(latest_result(request, "fares"))
    return read["cents"]


def next_step(request: ModelRequest) -> ModelResponse:
    """Buy; buy again at the new fare if a refresh refused it; say how it ended."""
    bought = latest_result(request, "buy")
    if bought is None:
        FARE["cents"] = 13000  # the fare moves while the model writes
        return reply(tool_use("buy", route="LIS-BER", cents=fare(request)))
    if bought.is_error and "relied on changed" in str(bought.content):
        return reply(tool_use("buy", route="LIS-BER", cents=fare(request)))
    if bought.is_error:
        return reply(text(f"Not bought: {bought.content}"))
    return reply(text(f"Bought {result_json(bought)['ticket']}."))


desk = Agent(
    name="desk",
    model="claude-sonnet-4-6",
    system="Buy the seat at today's fare.",
    tools=[fares, buy],
    script=[reply(tool_use("fares", route="LIS-BER")), next_step, next_step, next_step],
)


async def trip(client: Client, approve: bool, **start: Any) -> str:
    """One run; the manager approves or rejects each purchase. Its answer."""
    handle = await runs.start_run(client, "desk", "LIS-BER", task_queue="desk", **start)
    async for event in runs.events(client, handle.id):
        if isinstance(event, ApprovalRequested):
            if approve:
                await runs.approve(client, handle.id, event.step_id, reviewer="manager")
            else:
                await runs.reject(
                    client, handle.id, event.step_id, reviewer="manager", reason="over budget"
                )
        elif isinstance(event, RunEnded):
            break
    return (await handle.result()).output


async def both(client: Client) -> tuple[str, str]:
    """A run whose fare moves (its own `fresh_for`), then one the manager rejects."""
    async with build_worker(client, [desk], task_queue="desk"):
        fresh = {"fares": {"fresh_for": timedelta(milliseconds=1)}}  # this run's own
        bought = await trip(client, approve=True, tool_options=fresh)
        rejected = await trip(client, approve=False)
    assert bought == "Bought T-13000."
    assert rejected.startswith("Not bought: The call to buy was rejected by manager")
    return bought, rejected


async def main() -> None:
    """Both runs against the server your settings name."""
    print(*await both(await connect()), sep="\n")


if __name__ == "__main__":
    asyncio.run(main())
