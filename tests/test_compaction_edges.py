"""Compaction meets outages, corrections, fork and typed output: every promise still holds."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence
from pathlib import Path

import pytest
from temporalio.client import Client

from tests.agents import Payments, build_agent, long_script
from tests.conftest import Claude, running_worker, start_continuing, wait_for_state
from tests.fake_messages_api import FakeMessagesAPI, text, thinking, tool_use
from tests.test_model_outages import TWO_TRIES
from tests.test_operator_edges import fix, results_for
from tests.test_typed_output import Receipt
from waypoint._providers.scripted import ScriptedModel
from waypoint.client import runs
from waypoint.errors import DecisionRefusedError
from waypoint.protocol import (
    AgentState,
    Limits,
    ModelRequest,
    ModelResponse,
    ModelSettings,
    ResumeRequest,
    TextBlock,
)
from waypoint.testing import final_answer, reply
from waypoint.testing import text as said
from waypoint.testing import tool_use as calls

PAGE = "x" * 6_000  # about 1,500 tokens a turn


def four_pages_then(api: FakeMessagesAPI) -> None:
    """Four turns that fill the fake server's 6,000-token window: turn 5 must compact."""
    for i in range(4):
        api.enqueue_message(text(PAGE), tool_use("add", {"a": i, "b": 1}))


def summary_then_done(api: FakeMessagesAPI) -> None:
    """The compaction step's summary, then the run's last reply."""
    api.enqueue_message(text("summary of the early turns"))
    api.enqueue_message(text("Done."))


def compaction_texts(api: FakeMessagesAPI) -> list[str]:
    """What each summary request sent the model, in order."""
    return [
        r.body["messages"][0]["content"][0]["text"]
        for r in api.message_requests
        if "compact an agent's working memory" in str(r.body.get("system"))
    ]


@pytest.mark.parametrize("errors", [(529, 529), (401,)], ids=["overloaded", "rotated-key"])
async def test_a_compaction_that_fails_parks_the_run_and_resume_finishes_it(
    client: Client, task_queue: str, tmp_path: Path, errors: Sequence[int], claude: Claude
) -> None:
    agent = build_agent(Payments(tmp_path / "p.db"), script=[])
    with FakeMessagesAPI(count_tokens=True, context_window=6_000) as api:
        four_pages_then(api)
        for status in errors:  # the compaction step's tries
            api.enqueue_error(status)
        summary_then_done(api)
        async with running_worker(
            client,
            [agent],
            task_queue,
            claude=claude(api),
            max_cached_workflows=0,  # every task replays the parked compaction from history
        ):
            handle = await runs.start_run(
                client, "payer", "go", task_queue=task_queue, options=TWO_TRIES
            )
            parked = await wait_for_state(client, handle.id, "model_unavailable", timeout=60)
            assert str(errors[-1]) in parked.detail
            step = (await runs.ledger(client, handle.id))[-1]
            assert step.step_id == "t5.compact.ctx" and step.summary.startswith("parked:")
            await handle.signal("resume", ResumeRequest(reviewer="ops"))
            result = await asyncio.wait_for(handle.result(), 60)
    assert result.state == "done" and result.output == "Done."
    compaction = next(r for r in result.ledger if r.step_id == "t5.compact.ctx")
    assert compaction.status == "completed" and "summarised turns 1-1" in compaction.summary
    assert len(compaction_texts(api)) == len(errors) + 1


@pytest.mark.parametrize(
    "thinks, kept",
    [((True, False, False, False), 0), ((True, False, True, False), 2)],
    ids=["no-interleaved-thinking", "adaptive-skipped-one"],
)
async def test_with_thinking_on_the_kept_tail_opens_with_a_thinking_reply(
    client: Client,
    task_queue: str,
    tmp_path: Path,
    thinks: tuple[bool, ...],
    kept: int,
    claude: Claude,
) -> None:
    """The summary starts the assistant turn the next request continues: it must open thinking.

    A reply to a tool result has no thinking without interleaved thinking, and adaptive thinking
    may write none, so the tail begins at the next reply that has it, or there is none.
    """
    agent = build_agent(Payments(tmp_path / "p.db"), script=[])
    agent.settings = ModelSettings(thinking="adaptive")
    with FakeMessagesAPI(count_tokens=True, context_window=6_000) as api:
        for i, thinks_now in enumerate(thinks):
            plan = [thinking(f"plan {i}")] if thinks_now else []
            api.enqueue_message(*plan, text(PAGE), tool_use("add", {"a": i, "b": 1}))
        summary_then_done(api)
        async with running_worker(
            client, [agent], task_queue, claude=claude(api), max_cached_workflows=0
        ):
            handle = await runs.start_run(client, "payer", "go", task_queue=task_queue)
            # Before: the tail began at turn 2's reply, without thinking: a 400, parked.
            result = await asyncio.wait_for(handle.result(), 60)
    assert result.state == "done" and result.output == "Done."
    after = api.message_requests[-1].body["messages"]
    assert "summarised by step t5.compact.ctx" in after[0]["content"][0]["text"]
    assert len(after) == 1 + 2 * kept
    if kept:
        assert after[1]["content"][0] == {
            "type": "thinking",
            "thinking": "plan 2",
            "signature": api.sign("plan 2"),
        }


async def test_a_summary_request_too_long_for_the_model_is_made_again_over_half_as_much(
    client: Client, task_queue: str, tmp_path: Path, claude: Claude
) -> None:
    agent = build_agent(Payments(tmp_path / "p.db"), script=[])
    with FakeMessagesAPI(count_tokens=True, context_window=6_000) as api:
        four_pages_then(api)
        api.enqueue_error(400, message="prompt is too long: 7000 tokens > 6000 maximum")
        summary_then_done(api)
        async with running_worker(client, [agent], task_queue, claude=claude(api)):
            handle = await runs.start_run(client, "payer", "go", task_queue=task_queue)
            result = await asyncio.wait_for(handle.result(), 60)
    assert result.state == "done" and result.output == "Done."
    first, second = compaction_texts(api)
    assert len(second) <= len(first) // 2 + 100 and "characters elided" in second


async def test_the_compaction_before_continue_as_new_renders_a_bounded_transcript(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    page = "y" * 2_000
    script = [reply(said(f"turn {i} {page}"), calls("add", a=i, b=i)) for i in range(1, 12)]
    agent = build_agent(Payments(tmp_path / "p.db"), [*script, reply(said("done"))])
    agent.settings = ModelSettings(context_window=1_000, compact_at=100.0)  # no ctx compaction
    async with running_worker(client, [agent], task_queue) as model:
        handle = await start_continuing(client, f"bounded-{task_queue}", task_queue)
        result = await asyncio.wait_for(handle.result(), 120)
    assert result.output == "done"
    digests = [r.messages[0].content[0] for r in model.requests if r.purpose == "compact"]
    assert digests and all(isinstance(d, TextBlock) for d in digests)
    bound = 3 * 1_000 + 100  # three characters a token of the window, and the elision line
    assert all(len(d.text) <= bound for d in digests if isinstance(d, TextBlock))


class HeldCompaction(ScriptedModel):
    """A scripted model whose first summary waits until the test lets it go."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.compacting = asyncio.Event()
        self.release = asyncio.Event()

    async def complete(self, request: ModelRequest) -> ModelResponse:
        if request.purpose == "compact" and not self.release.is_set():
            self.compacting.set()
            await self.release.wait()
        return await super().complete(request)


async def test_a_correction_sent_during_a_compaction_reaches_the_model(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    payments = Payments(tmp_path / "p.db")
    agent = build_agent(payments, long_script(12, pay_every=100), limits=Limits(max_turns=50))
    model = HeldCompaction({agent.name: agent.script})
    async with running_worker(client, [agent], task_queue, scripted=model, max_cached_workflows=0):
        handle = await start_continuing(client, f"held-{task_queue}", task_queue)
        await asyncio.wait_for(model.compacting.wait(), 60)
        compaction = next(
            r for r in await runs.ledger(client, handle.id) if r.step_id.endswith(".compact")
        )
        turn = int(compaction.step_id.split(".")[0][1:])
        sent = await runs.correct(client, handle.id, fix(f"t{turn}.tool.1.weather"))
        assert sent.recorded  # a recent turn: kept verbatim, so it can be corrected
        with pytest.raises(DecisionRefusedError, match=f"turn {turn - 2} is being compacted"):
            await runs.correct(client, handle.id, fix(f"t{turn - 2}.tool.1.weather"))
        model.release.set()
        result = await asyncio.wait_for(handle.result(), 120)
    assert result.output == "done after 12 turns"
    (after,) = [r for r in model.requests if r.step_id == f"t{turn + 1}.model"]
    seen = [str(b.content) for m in after.messages for b in m.content if b.type == "tool_result"]
    assert "corrected" in seen


async def test_after_a_context_compaction_correct_and_fork_address_the_named_turn(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    payments = Payments(tmp_path / "p.db")
    script = [reply(said(f"turn {i} " + "x" * 400), calls("add", a=i, b=i)) for i in range(1, 7)]
    script += [reply(calls("pay", payee="ada", amount=5)), reply(said("done"))]
    agent = build_agent(payments, script, approval=True)
    agent.settings = ModelSettings(context_window=1_000, compact_at=0.5)
    async with running_worker(client, [agent], task_queue, max_cached_workflows=0):
        handle = await runs.start_run(client, "payer", "go", task_queue=task_queue)
        await wait_for_state(client, handle.id, "awaiting_approval", timeout=60)
        before = await runs.state(client, handle.id)
        assert before.turn == 7 and before.compacted_turns > 0
        head = before.messages[0].content[0]
        assert isinstance(head, TextBlock)
        assert f"[Turns 1-{before.compacted_turns} so far" in head.text
        sent = await runs.correct(client, handle.id, fix("t6.tool.1.add"))
        assert sent.recorded
        state = await runs.state(client, handle.id)
        assert results_for(state, "toolu_t6_2") == ["corrected"]
        assert results_for(state, "toolu_t5_2") == results_for(before, "toolu_t5_2")
        fork = await handle.query("fork_state", 5, result_type=AgentState)
        (last,) = fork.messages[-1].content
        assert last.type == "tool_result" and last.tool_use_id == "toolu_t5_2"
        await runs.approve(client, handle.id, "t7.tool.1.pay", reviewer="me")
        result = await asyncio.wait_for(handle.result(), 60)
    assert result.output == "done" and payments.count() == 1


async def test_with_a_typed_output_correct_replaces_the_named_tools_result(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """`final_answer` beside weather: weather is `t1.tool.1` though it is the second call."""
    payments = Payments(tmp_path / "p.db")
    receipt = Receipt(payee="ada", amount=5)
    script = [
        reply(final_answer(receipt), calls("weather", city="Oslo")),
        reply(calls("pay", payee="ada", amount=5)),
        reply(final_answer(receipt)),
    ]
    agent = dataclasses.replace(build_agent(payments, script, approval=True), output_type=Receipt)
    async with running_worker(client, [agent], task_queue):
        handle = await runs.start_run(client, "payer", "pay", task_queue=task_queue)
        await wait_for_state(client, handle.id, "awaiting_approval")
        before = await runs.state(client, handle.id)
        await runs.correct(client, handle.id, fix("t1.tool.1.weather"))
        state = await runs.state(client, handle.id)
        assert results_for(state, "toolu_t1_2") == ["corrected"]
        assert results_for(state, "toolu_t1_1") == results_for(before, "toolu_t1_1")
        await runs.approve(client, handle.id, "t2.tool.1.pay", reviewer="me")
        result = await asyncio.wait_for(handle.result(), 60)
    assert result.output_json == receipt.model_dump() and payments.count() == 1
