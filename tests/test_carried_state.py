"""What a long run carries across continue-as-new stays bounded; nothing it did is lost."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from tests.agents import PayArgs, Payments, build_agent, long_script
from tests.cli import ROOT, waypoint
from tests.conftest import running_worker, start_directly
from waypoint._workflows.operator import fork_state
from waypoint.client import runs
from waypoint.client.decisions import show_policy
from waypoint.protocol import (
    AgentState,
    ApprovalDecision,
    HistoryLimits,
    LedgerArchive,
    Limits,
    Message,
    RunInput,
    RunStatus,
    StepRecord,
    TextBlock,
)
from waypoint.testing import reply, text, tool_use


async def started_inputs(client: Client, run: str) -> list[tuple[int, RunInput]]:
    """Each history segment's first event size and input, oldest first."""
    found: list[tuple[int, RunInput]] = []
    run_id = (await client.get_workflow_handle(run).describe()).run_id
    while run_id:
        events = client.get_workflow_handle(run, run_id=run_id).fetch_history_events(page_size=1)
        first = await anext(aiter(events))
        started = first.workflow_execution_started_event_attributes
        (given,) = await client.data_converter.decode_wrapper(started.input, [RunInput])
        found.insert(0, (first.ByteSize(), given))
        run_id = started.continued_execution_run_id
    return found


async def wait_for_pending(client: Client, run: str, step_id: str, timeout: float = 30) -> None:
    """Poll the run's status until `step_id` (and only it) waits for approval."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        status = await runs.status(client, run)
        if [p.step_id for p in status.pending_approvals] == [step_id]:
            return
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"{step_id} never awaited approval: {status}")
        await asyncio.sleep(0.05)


async def test_long_run_carries_bounded_state_and_continues_only_when_history_fills(
    env: WorkflowEnvironment, client: Client, task_queue: str, tmp_path: Path
) -> None:
    turns, paid_turns = 60, [*range(5, 60, 5), 60]
    payments = Payments(tmp_path / "p.db")
    script = long_script(turns + 1, pay_every=5)
    script[turns - 1] = reply(tool_use("pay", payee="last", amount=999))  # a person approves
    script[turns] = reply(text(f"done after {turns} turns"))

    def big(args: PayArgs) -> bool:
        return args.amount == 999

    agent = build_agent(payments, script, approval=big, limits=Limits(max_turns=99))
    cli_env = {
        **os.environ,
        "TEMPORAL_ADDRESS": env.client.service_client.config.target_host,
        "TEMPORAL_NAMESPACE": "default",
        "PYTHONPATH": str(ROOT),
    }
    budget = HistoryLimits(
        max_events=100_000, max_bytes=40_000, keep_recent_turns=2, keep_events=16
    )
    async with running_worker(client, [agent], task_queue):
        run = RunInput(agent="payer", task="long", history=budget)
        handle = await start_directly(client, f"carry-{task_queue}", task_queue, run)
        await wait_for_pending(client, handle.id, f"t{turns}.tool.1.pay", timeout=120)
        # While it waits, `status` shows the totals and what was archived, `ledger` every step.
        # The CLI runs in a thread: the worker answering its queries lives on this event loop.
        shown = await asyncio.to_thread(waypoint, cli_env, "status", handle.id)
        assert shown.returncode == 0, shown.stderr
        waiting = await runs.status(client, handle.id)
        assert waiting.steps_archived > 0
        assert f"tokens {waiting.total_tokens:,}" in shown.stdout
        archived = f"{waiting.continues} continues, {waiting.steps_archived} earlier steps archived"
        assert archived in shown.stdout
        listed = await asyncio.to_thread(waypoint, cli_env, "ledger", handle.id, "--json")
        live = json.loads(listed.stdout)
        assert len(live) == len(await runs.ledger(client, handle.id)) + waiting.steps_archived
        await runs.approve(client, handle.id, f"t{turns}.tool.1.pay", reviewer="me")
        result = await handle.result()
        status = await client.get_workflow_handle(handle.id).query("status", result_type=RunStatus)
    assert result.output == f"done after {turns} turns" and result.turns == turns + 1

    segments = await started_inputs(client, handle.id)
    carried = [given.resume for _, given in segments[1:] if given.resume is not None]
    began = [s.turn for s in carried]
    sizes = [size for size, _ in segments[1:]]
    # Effect steps are always carried (about 450 bytes each): the rest must not grow.
    rest = [
        size - sum(len(r.model_dump_json()) for r in s.ledger if r.effect_key)
        for size, s in zip(sizes, carried, strict=True)
    ]
    print(f"{len(segments)} segments from turns {began}, input bytes {sizes}, less effects {rest}")
    # The run hands over when its history fills, not every turn, to the end of the run ...
    assert status.continues == len(segments) - 1 >= 3
    assert all(later - earlier >= 3 for earlier, later in zip(began, began[1:], strict=False))
    # ... because what it hands over stays small: no larger late in the run than early on.
    assert max(sizes) < 20_000
    # (A handover after a paying turn carries its results in the recent turns: about 1 KB
    # more than one after a plain turn, and where the run hands over moves with every event
    # a change adds to each segment, such as a patch marker. So the bound is on growth past
    # the first carried segment; a later one may carry less, e.g. near the run's end.)
    assert max(rest[1:]) - rest[1] < 1_500
    assert max(len([r for r in s.ledger if not r.effect_key]) for s in carried) < 25

    # Effects happened once each, and their records are all carried to the end.
    effects = [r for r in result.ledger if r.effect_key]
    assert [r.step_id for r in effects] == [
        *(f"t{t}.tool.2.pay" for t in paid_turns[:-1]),
        f"t{turns}.tool.1.pay",
    ]
    assert all(r.status == "completed" and payments.count(r.effect_key) == 1 for r in effects)
    assert payments.count() == len(paid_turns)

    # Earlier steps were archived, counted, and read back whole from the closed runs' inputs.
    assert result.steps_archived == status.steps_archived > 0
    assert len(result.ledger) < 60
    whole, note = await runs.whole_ledger(client, handle.id, result.ledger)
    assert note == ""
    expected = {f"t{t}.model" for t in range(1, turns + 2)}
    expected |= {f"t{t}.tool.1.weather" for t in range(1, turns)}
    expected |= {f"t{t}.tool.2.pay" for t in paid_turns[:-1]} | {f"t{turns}.tool.1.pay"}
    ids = [r.step_id for r in whole]
    assert expected <= set(ids) and len(ids) == len(set(ids))
    assert len(whole) == len(result.ledger) + result.steps_archived
    assert sum(r.tokens for r in whole) == result.total_tokens == status.total_tokens
    assert abs(sum(r.cost_usd or 0.0 for r in whole) - result.cost_usd) < 1e-9
    models = [int(i.split(".")[0][1:]) for i in ids if i.endswith(".model")]
    assert models == sorted(models)  # in the order they ran

    # The CLI shows the same whole ledger of the finished run, with no worker up.
    shown = waypoint(cli_env, "ledger", handle.id, "--json")
    assert shown.returncode == 0, shown.stderr
    assert [r["step_id"] for r in json.loads(shown.stdout)] == ids


async def test_a_flood_of_refused_signals_keeps_the_latest_and_counts_the_rest(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    payments = Payments(tmp_path / "p.db")
    script = [reply(tool_use("pay", payee="ada", amount=5)), reply(text("paid"))]
    agent = build_agent(payments, script, approval=True)
    budget = HistoryLimits(keep_ignored_signals=5)
    async with running_worker(client, [agent], task_queue):
        run = RunInput(agent="payer", task="pay", history=budget)
        handle = await start_directly(client, f"flood-{task_queue}", task_queue, run)
        await wait_for_pending(client, handle.id, "t1.tool.1.pay")
        for n in range(30):
            await handle.signal("approve", ApprovalDecision(step_id=f"t9.tool.{n}.pay"))
        deadline = asyncio.get_running_loop().time() + 30
        while (status := await runs.status(client, handle.id)).ignored_dropped < 25:
            assert asyncio.get_running_loop().time() < deadline, status
            await asyncio.sleep(0.05)
        assert status.state == "awaiting_approval"
        assert [i.step_id for i in status.ignored_signals] == [
            f"t9.tool.{n}.pay" for n in range(25, 30)
        ]
        assert all("no approval is pending" in i.reason for i in status.ignored_signals)
        await runs.approve(client, handle.id, "t1.tool.1.pay", reviewer="ops")
        result = await handle.result()
    assert result.output == "paid" and payments.count() == 1


async def test_a_run_remembers_its_latest_approvals_and_asks_again_for_a_forgotten_one(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    payments = Payments(tmp_path / "p.db")
    calls = [("a", 1), ("b", 2), ("c", 3), ("c", 3), ("a", 1)]
    script = [reply(tool_use("pay", payee=p, amount=n)) for p, n in calls]
    agent = build_agent(payments, [*script, reply(text("paid"))], approval=True)
    budget = HistoryLimits(keep_remembered=2)
    async with running_worker(client, [agent], task_queue):
        run = RunInput(agent="payer", task="pay", history=budget)
        handle = await start_directly(client, f"remember-{task_queue}", task_queue, run)
        for turn in (1, 2, 3):  # each approved and remembered for exactly these arguments
            await wait_for_pending(client, handle.id, f"t{turn}.tool.1.pay")
            await runs.approve(
                client,
                handle.id,
                f"t{turn}.tool.1.pay",
                reviewer="grace",
                remember="args",
            )
        # Turn 4 repeats c 3, still remembered; turn 5 repeats a 1, forgotten: a person decides.
        await wait_for_pending(client, handle.id, "t5.tool.1.pay")
        view = await show_policy(client, handle.id)
        assert [m.arguments for m in view.remembered] == [
            {"payee": "b", "amount": 2},
            {"payee": "c", "amount": 3},
        ]
        assert view.forgotten == 1
        await runs.approve(client, handle.id, "t5.tool.1.pay", reviewer="grace")
        result = await handle.result()
    assert result.output == "paid" and payments.count() == len(calls)
    steps = {r.step_id: r for r in result.ledger}
    assert "forgot the oldest 1, of pay" in steps["t3.tool.1.pay.remember"].summary
    assert (steps["t4.tool.1.pay"].decided_by or "").startswith("remembered: grace")
    assert (steps["t5.tool.1.pay"].decided_by or "").startswith("grace")


def test_a_fork_counts_the_archived_steps_before_it_in_its_totals() -> None:
    def step(step_id: str, tokens: int, cost: float) -> StepRecord:
        return StepRecord(
            step_id=step_id,
            kind="model",
            input_hash="h",
            status="completed",
            tokens=tokens,
            cost_usd=cost,
        )

    s = AgentState(
        input=RunInput(agent="a", task="task"),
        messages=[
            Message(role="user", content=[TextBlock(text="[turns 1-3 summarised]")]),
            Message(role="assistant", content=[TextBlock(text="four")]),
            Message(role="user", content=[TextBlock(text="go on")]),
            Message(role="assistant", content=[TextBlock(text="five")]),
        ],
        ledger=[step("t4.model", 10, 0.1), step("t5.model", 20, 0.2)],
        turn=5,
        compacted_turns=3,
        archived=LedgerArchive(steps=6, tokens=300, cost_usd=3.0),
    )
    fork = fork_state(s, after_turn=4)
    assert [r.step_id for r in fork.ledger] == ["t4.model"]
    assert (fork.total_tokens, fork.cost_usd) == (310, 3.1)
    assert fork.archived.steps == 6
