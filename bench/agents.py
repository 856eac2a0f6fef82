"""The agents the benchmarks run: a no-op tool and a zero-latency scripted model.

`app` is what a benchmark's worker subprocess loads (`waypoint worker --app bench.agents:app`).
A run of `stepper(steps)` takes exactly `steps` steps: the spec, then a model step and a tool step
per turn, then a final model step.
"""

from __future__ import annotations

from pydantic import BaseModel

from waypoint._agent import Agent
from waypoint._tools import tool
from waypoint.protocol import Limits
from waypoint.testing import reply, text, tool_use

WARM_UP_STEPS = 4
"""Steps of the warm-up agent a worker subprocess also serves."""

RESUME_TURNS = 1_100
"""Script length of the resume agent: enough for the 1,000-step run and its repeats."""


class NoopArgs(BaseModel):
    n: int


async def _noop(args: NoopArgs) -> str:
    """Do nothing."""
    return "ok"


async def _pay(args: NoopArgs) -> str:
    """Pay (an effect that needs approval)."""
    return "paid"


noop_read = tool("read", name="noop")(_noop)
noop_pure = tool("pure", name="noop")(_noop)
pay = tool("effect", name="pay", idempotent=True, requires_approval=True)(_pay)


def _script(tool_turns: int, calls: int = 1) -> list:
    turns = [
        reply(*(tool_use("noop", n=k * 10 + c) for c in range(calls)))
        for k in range(1, tool_turns + 1)
    ]
    return [*turns, reply(text("done"))]


def stepper_name(steps: int, *, pure: bool = False, calls: int = 1) -> str:
    """The name of `stepper(steps, pure=pure, calls=calls)`."""
    return f"{'pure' if pure else 'read'}{calls}-{steps}"


def stepper(steps: int, *, pure: bool = False, calls: int = 1) -> Agent:
    """A run of `steps` (even) steps with one tool call a turn; `calls` > 1 adds more per turn."""
    turns = steps // 2
    return Agent(
        name=stepper_name(steps, pure=pure, calls=calls),
        model="bench",
        system="benchmark",
        tools=[noop_pure if pure else noop_read],
        limits=Limits(max_turns=turns + 1),
        script=_script(turns - 1, calls),
    )


def resumer() -> Agent:
    """A long no-op agent; runs park where their `Limits(max_turns=K)` says."""
    return Agent(
        name="resume",
        model="bench",
        system="benchmark",
        tools=[noop_read],
        limits=Limits(max_turns=RESUME_TURNS, max_continue_as_new=10_000),
        script=_script(RESUME_TURNS),
    )


def approver() -> Agent:
    """Calls one effect tool that always needs approval, so every run parks at once."""
    return Agent(
        name="approve",
        model="bench",
        system="benchmark",
        tools=[pay],
        script=[reply(tool_use("pay", n=1)), reply(text("done"))],
    )


def app() -> list[Agent]:
    """The agents a benchmark worker subprocess serves."""
    return [resumer(), approver(), stepper(WARM_UP_STEPS)]
