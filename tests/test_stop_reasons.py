"""Every stop reason has its own path; a cut-off tool call never runs. Real dev server."""

from __future__ import annotations

import asyncio
from pathlib import Path

from temporalio.client import Client

from tests.agents import Payments, build_agent
from tests.conftest import running_worker, wait_for_state
from waypoint._agent import Agent
from waypoint.client import runs
from waypoint.client.runs import start_run
from waypoint.protocol import (
    ModelRequest,
    ModelResponse,
    ModelSettings,
    ResumeRequest,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from waypoint.protocol.run import RunResult
from waypoint.testing import last_tool_results, reply, text, tool_use

FULL = 16_000


def cut_pay(amount: int) -> ModelResponse:
    """A reply whose pay call the stream cut off: the SDK would hand us `amount` as parsed."""
    call = ToolUseBlock(
        id="", name="pay", input={"payee": "ada", "amount": amount}, invalid="cut off at max_tokens"
    )
    return ModelResponse(
        content=[TextBlock(text="Paying."), call], stop_reason="max_tokens", model="scripted"
    )


def settings(**changes: object) -> ModelSettings:
    return ModelSettings(max_output_tokens=FULL).model_copy(update=changes)


def results_seen(request: ModelRequest) -> list[ToolResultBlock]:
    return last_tool_results(request)


async def finished(client: Client, task_queue: str, agent: Agent, task: str) -> RunResult:
    """The agent's run of `task` on a worker of its own, once it ended."""
    async with running_worker(client, [agent], task_queue):
        return await (await start_run(client, agent.name, task, task_queue=task_queue)).result()


async def test_cut_off_tool_call_is_reasked_with_the_full_budget_and_never_run(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    payments = Payments(tmp_path / "p.db")

    def turn1(request: ModelRequest) -> ModelResponse:
        if request.max_tokens < FULL:
            return cut_pay(12)  # `{"payee":"ada","amount": 12` where 1200 was meant
        return reply(tool_use("pay", payee="ada", amount=1200))

    agent = build_agent(payments, [turn1, reply(text("Paid ada 1200."))])
    agent.settings = settings()
    result = await finished(client, task_queue, agent, "pay ada")
    assert payments.count() == 1
    assert payments.find(result.ledger[3].effect_key or "")["amount"] == 1200  # type: ignore[index]
    models = [(r.step_id, r.stop_reason) for r in result.ledger if r.kind == "model"]
    assert models == [
        ("t1.model", "max_tokens"),
        ("t1.model.full", "tool_use"),
        ("t2.model", "end_turn"),
    ]
    assert (result.state, result.output) == ("done", "Paid ada 1200.")


async def test_a_reply_cut_off_even_at_full_budget_runs_none_of_its_calls(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    payments = Payments(tmp_path / "p.db")
    seen: list[ToolResultBlock] = []

    def turn2(request: ModelRequest) -> ModelResponse:
        seen.extend(results_seen(request))
        return reply(text("I will split the work."))

    def turn1(request: ModelRequest) -> ModelResponse:
        whole = ToolUseBlock(id="", name="add", input={"a": 1, "b": 2})
        return cut_pay(12).model_copy(update={"content": [whole, *cut_pay(12).content]})

    agent = build_agent(payments, [turn1, turn2])
    agent.settings = settings()
    result = await finished(client, task_queue, agent, "pay ada")
    assert payments.count() == 0 and payments.faults.executions == 0
    assert len(seen) == 2 and all(r.is_error for r in seen)
    assert all("cut off at max_tokens" in str(r.content) for r in seen)
    tools = [r for r in result.ledger if r.kind == "tool"]
    assert [(r.step_id, r.status) for r in tools] == [
        ("t1.tool.1.add", "error"),
        ("t1.tool.2.pay", "error"),
    ]


async def test_a_text_answer_cut_off_is_continued_and_joined(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    payments = Payments(tmp_path / "p.db")
    # The first reply is cut at the small budget and dropped; the re-ask is cut too, and kept.
    parts = iter(["Dropped draft ", "The answer is a long ", "story that ends here."])

    def turn1(request: ModelRequest) -> ModelResponse:
        part = next(parts)
        stop = "end_turn" if part.endswith("here.") else "max_tokens"
        return ModelResponse(content=[TextBlock(text=part)], stop_reason=stop, model="scripted")

    agent = build_agent(payments, [turn1])
    agent.settings = settings()
    scripted_requests: list[ModelRequest] = []
    async with running_worker(client, [agent], task_queue) as scripted:
        result = await (await start_run(client, "payer", "tell", task_queue=task_queue)).result()
        scripted_requests = scripted.requests
    assert result.output == "The answer is a long story that ends here."
    assert [r.step_id for r in result.ledger if r.kind == "model"] == [
        "t1.model",
        "t1.model.full",
        "t1.model.cont1",
    ]
    # The continuation reads the cut-off answer as its last message, with the full budget.
    last = scripted_requests[-1]
    assert last.messages[-1].role == "assistant" and last.max_tokens == FULL


async def test_pause_turn_continues_the_turn_as_a_recorded_step(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    payments = Payments(tmp_path / "p.db")
    replies = iter(
        [
            ModelResponse(
                content=[TextBlock(text="Searching...")], stop_reason="pause_turn", model="s"
            ),
            reply(text(" Found it.")),
        ]
    )
    agent = build_agent(payments, [lambda request: next(replies)])
    result = await finished(client, task_queue, agent, "find")
    assert [(r.step_id, r.stop_reason) for r in result.ledger if r.kind == "model"] == [
        ("t1.model", "pause_turn"),
        ("t1.model.cont1", "end_turn"),
    ]
    assert result.output == "Searching... Found it." and result.state == "done"


async def test_refusal_ends_the_run_refused_with_its_details(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    payments = Payments(tmp_path / "p.db")
    refusal = ModelResponse(
        content=[TextBlock(text="I can't help with that.")],
        stop_reason="refusal",
        stop_details="cyber: the request could enable malware",
        model="s",
    )
    agent = build_agent(payments, [refusal])
    async with running_worker(client, [agent], task_queue):
        handle = await start_run(client, "payer", "write malware", task_queue=task_queue)
        result = await handle.result()
        status = await runs.status(client, handle.id)
    assert result.state == "refused" and result.stop_reason == "refusal"
    assert result.stop_details == "cyber: the request could enable malware"
    assert status.state == "refused" and status.last_stop_reason == "refusal"
    assert "malware" in status.detail


async def test_stop_sequence_is_recorded(client: Client, task_queue: str, tmp_path: Path) -> None:
    payments = Payments(tmp_path / "p.db")
    stopped = ModelResponse(
        content=[TextBlock(text="A")], stop_reason="stop_sequence", stop_sequence="###", model="s"
    )
    agent = build_agent(payments, [stopped])
    result = await finished(client, task_queue, agent, "go")
    assert result.stop_reason == "stop_sequence"
    assert result.ledger[-1].stop_reason == "stop_sequence"


async def test_tool_input_that_is_not_an_object_is_an_error_result(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    payments = Payments(tmp_path / "p.db")
    seen: list[ToolResultBlock] = []
    bad = ToolUseBlock(
        id="", name="pay", input={}, invalid="tool input was not a JSON object: [1200]"
    )

    def turn2(request: ModelRequest) -> ModelResponse:
        seen.extend(results_seen(request))
        return reply(text("Sorry."))

    agent = build_agent(
        payments, [ModelResponse(content=[bad], stop_reason="tool_use", model="s"), turn2]
    )
    await finished(client, task_queue, agent, "pay")
    assert payments.faults.executions == 0
    assert seen[0].is_error and "not a JSON object" in str(seen[0].content)


async def test_context_near_the_window_compacts_before_the_next_call(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    payments = Payments(tmp_path / "p.db")
    script = [reply(text(f"turn {i} " + "x" * 400), tool_use("add", a=i, b=i)) for i in range(1, 7)]
    agent = build_agent(payments, [*script, reply(text("done"))])
    agent.settings = settings(context_window=1_000, compact_at=0.5)
    result = await finished(client, task_queue, agent, "go")
    compactions = [r.step_id for r in result.ledger if ".compact" in r.step_id]
    assert compactions and all(c.endswith(".compact.ctx") for c in compactions)
    assert result.output == "done" and result.state == "done"


async def test_max_parallel_tools_bounds_a_replys_fan_out(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    payments = Payments(tmp_path / "p.db")
    calls = [tool_use("weather", city=f"c{i}") for i in range(4)]
    agent = build_agent(payments, [reply(*calls), reply(text("ok"))])
    agent.settings = settings(max_parallel_tools=1)
    # A read tool that records how many of its calls overlap.
    running, peak = 0, 0
    weather = agent.registry.get("weather")
    assert weather is not None
    inner = weather.fn

    async def counting(args):  # type: ignore[no-untyped-def]
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.05)
        running -= 1
        return await inner(args)

    weather.fn = counting
    result = await finished(client, task_queue, agent, "go")
    assert peak == 1
    assert sum(1 for r in result.ledger if r.tool == "weather" and r.status == "completed") == 4


async def test_resume_is_refused_when_nothing_is_parked(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    payments = Payments(tmp_path / "p.db")
    agent = build_agent(payments, [reply(tool_use("pay", payee="a", amount=1)), reply(text("x"))])
    agent = build_agent(
        payments, [reply(tool_use("pay", payee="a", amount=1)), reply(text("x"))], approval=True
    )
    async with running_worker(client, [agent], task_queue):
        handle = await start_run(client, "payer", "go", task_queue=task_queue)
        await wait_for_state(client, handle.id, "awaiting_approval")
        await handle.signal("resume", ResumeRequest(reviewer="bob"))
        status = await runs.status(client, handle.id)
        while not status.ignored_signals:
            status = await runs.status(client, handle.id)
        await handle.terminate("test over")
    assert "nothing to resume" in status.ignored_signals[0].reason


async def test_a_malformed_operator_signal_is_recorded_not_lost(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    payments = Payments(tmp_path / "p.db")
    agent = build_agent(
        payments, [reply(tool_use("pay", payee="a", amount=1)), reply(text("x"))], approval=True
    )
    async with running_worker(client, [agent], task_queue):
        handle = await start_run(client, "payer", "go", task_queue=task_queue)
        await wait_for_state(client, handle.id, "awaiting_approval")
        await handle.signal("raise_limits", {"max_turns": "lots"})
        await handle.signal("steer", {"message": ["not", "text"]})
        status = await runs.status(client, handle.id)
        while len(status.ignored_signals) < 2:
            status = await runs.status(client, handle.id)
        await handle.terminate("test over")
    reasons = [i.reason for i in status.ignored_signals]
    assert "malformed raise_limits payload (max_turns: int_parsing)" in reasons[0]
    assert "malformed steer payload" in reasons[1]
