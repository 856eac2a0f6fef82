"""The agent loop end to end on a real dev server with the scripted model."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel
from temporalio.client import Client

from tests.agents import PAY_SCRIPT, Payments, build_agent
from tests.conftest import running_worker, wait_for_state
from tests.support.payer import open_payer
from waypoint._agent import Agent
from waypoint._tools import tool
from waypoint.client.runs import start_run
from waypoint.protocol import Limits, ModelRequest, ModelResponse
from waypoint.testing import last_tool_results, reply, text, tool_use


async def test_run_completes_with_parallel_tools_and_one_payment(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    payments = Payments(tmp_path / "payments.db")
    agent = build_agent(payments, PAY_SCRIPT)
    async with running_worker(client, [agent], task_queue) as model:
        handle = await start_run(client, "payer", "pay ada 5", task_queue=task_queue)
        result = await handle.result()
    assert result.output == "Paid ada 5."
    assert result.turns == 3
    assert [r.step_id for r in result.ledger] == [
        "t0.spec",
        "t1.model",
        "t1.tool.1.weather",
        "t1.tool.2.add",
        "t2.model",
        "t2.tool.1.pay",
        "t3.model",
    ]
    assert all(r.status == "completed" for r in result.ledger)
    pay = result.ledger[5]
    assert pay.effect_key is not None
    assert pay.effect_key.startswith(f"{handle.id}/")
    assert pay.effect_key.endswith("/t2.tool.1.pay")
    assert payments.count(pay.effect_key) == 1
    assert model.calls == ["t1.model", "t2.model", "t3.model"]


async def test_malformed_arguments_and_unknown_tool_go_back_to_the_model(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    payments = Payments(tmp_path / "payments.db")
    seen: list[list[tuple[str, bool]]] = []

    def after_errors(request: ModelRequest) -> ModelResponse:
        seen.append([(r.content, r.is_error) for r in last_tool_results(request)])
        return reply(text("I could not do it."))

    script = [
        reply(
            tool_use("add", a="two", b=3),
            tool_use("teleport", to="Mars"),
            tool_use("pay", payee="ada", amount=-5),
            tool_use("weather", city="Atlantis"),
        ),
        after_errors,
    ]
    agent = build_agent(payments, script)
    async with running_worker(client, [agent], task_queue):
        handle = await start_run(client, "payer", "misbehave", task_queue=task_queue)
        result = await handle.result()
    assert result.output == "I could not do it."
    (add, teleport, pay, weather) = seen[0]
    assert add[1] and "Invalid arguments for add" in add[0] and "a:" in add[0]
    assert teleport[1] and "Unknown tool 'teleport'" in teleport[0] and "pay" in teleport[0]
    assert pay[1] and "amount" in pay[0]
    assert weather[1] and "no such city" in weather[0]
    statuses = {r.step_id: r.status for r in result.ledger}
    assert statuses["t1.tool.2.teleport"] == "error"
    assert statuses["t1.tool.1.add"] == "error"
    assert payments.count() == 0


async def test_every_task_replays_from_history_without_a_cache(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    uncached = {"max_cached_workflows": 0}
    async with open_payer(client, task_queue, tmp_path / "payments.db", worker=uncached) as run:
        result = await run.handle.result()
    assert result.output == "Paid ada 5."
    assert run.payments.count() == 1
    assert run.model.calls == ["t1.model", "t2.model", "t3.model"]


async def test_a_limit_parks_the_run_until_raised(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    payments = Payments(tmp_path / "payments.db")
    agent = build_agent(payments, PAY_SCRIPT, limits=Limits(max_turns=1))
    async with running_worker(client, [agent], task_queue) as model:
        handle = await start_run(client, "payer", "pay ada 5", task_queue=task_queue)
        status = await wait_for_state(client, handle.id, "limit_reached")
        assert "max_turns=1" in status.detail
        assert model.calls == ["t1.model"]
        await handle.signal("raise_limits", Limits(max_turns=10))
        result = await handle.result()
    assert result.output == "Paid ada 5."
    assert payments.count() == 1


class DivArgs(BaseModel):
    a: int
    b: int


@tool("pure", max_attempts=2)
async def divide(args: DivArgs) -> float:
    """Divide a by b."""
    return args.a / args.b


async def test_a_failing_pure_tool_goes_back_to_the_model_as_an_error(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """A pure tool that raises fails only its step; the model is told, the run goes on."""
    seen: list[str] = []

    def turn2(request: ModelRequest) -> ModelResponse:
        seen.extend(str(r.content) for r in last_tool_results(request) if r.is_error)
        return reply(text("Cannot divide by zero."))

    script = [reply(tool_use("divide", a=1, b=0)), turn2]
    agent = Agent("divider", "claude-sonnet-4-6", "You divide.", [divide], script=script)
    async with running_worker(client, [agent], task_queue):
        handle = await start_run(client, "divider", "1/0", task_queue=task_queue)
        result = await handle.result()
    assert result.state == "done" and seen and "ZeroDivisionError" in seen[0]
