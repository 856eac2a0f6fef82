"""The agent a steered kill test runs in worker subprocesses (`--app tests.steer_app:agents`).

Its scripted model writes every request it is asked, one JSON line each, to `$STEER_REQUESTS`,
so the test can count how often the model read a steer's message across worker lives.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.agents import Payments, build_agent
from waypoint._agent import Agent
from waypoint.protocol import ModelRequest, ModelResponse, TextBlock, ToolResultBlock
from waypoint.testing import reply, text, tool_use

TO_BOB = "Pay bob instead of ada."
SAY_DONE = "Then say: bob is paid."


def texts(request: ModelRequest) -> list[str]:
    """Every text the model was shown, tool results included."""
    found = []
    for message in request.messages:
        for block in message.content:
            if isinstance(block, TextBlock):
                found.append(block.text)
            elif isinstance(block, ToolResultBlock) and isinstance(block.content, str):
                found.append(block.content)
    return found


def agents() -> list[Agent]:
    """A payer that pays whoever the latest steer names, and logs what it was asked."""
    log = Path(os.environ["STEER_REQUESTS"])
    payments = Payments(Path(os.environ["WAYPOINT_TEST_PAYMENTS"]))

    def heard(request: ModelRequest) -> str:
        with log.open("a") as out:
            out.write(json.dumps({"step_id": request.step_id, "texts": texts(request)}) + "\n")
        return "\n".join(texts(request))

    def turn1(request: ModelRequest) -> ModelResponse:
        payee = "bob" if TO_BOB in heard(request) else "ada"
        return reply(tool_use("pay", payee=payee, amount=5))

    def turn2(request: ModelRequest) -> ModelResponse:
        return reply(text("bob is paid." if SAY_DONE in heard(request) else "Paid."))

    return [build_agent(payments, [turn1, turn2])]
