"""Record the golden histories replayed by `test_replay.py`.

`python -m tests.record_histories` records the histories that are missing; `--all` re-records
every one after a deliberate change of the workflow's shape (review the diff like code). The
killed-run history is written by `tests/test_kill.py` when `WAYPOINT_RECORD_HISTORIES=1`.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import tempfile
from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from tests.agents import (
    PAY_SCRIPT,
    Faults,
    Payments,
    build_agent,
    long_script,
    with_changed_pay,
)
from tests.conftest import running_worker, start_continuing, the_pending_approval, wait_for_state
from tests.support.history import start_bounded
from waypoint._agent import Agent
from waypoint.client import runs, verbs
from waypoint.client.decisions import set_policy
from waypoint.protocol import (
    HistoryLimits,
    Limits,
    ModelRequest,
    ModelResponse,
    ModelSettings,
    RedactedThinkingBlock,
    Resolution,
    ResumeRequest,
    RunResult,
    StepOptions,
    TextBlock,
    ThinkingBlock,
    ToolUseBlock,
)
from waypoint.protocol import search_attributes as sa
from waypoint.testing import final_answer, reply, text, tool_use

HISTORIES = Path(__file__).parent / "histories"
FAST = StepOptions(retry_initial_interval=timedelta(milliseconds=50))

Drive = Callable[[WorkflowHandle[Any, RunResult]], Awaitable[object]]
"""What a recorder does to its run while it runs: approve, steer, cancel..."""


async def recorded(
    client: Client,
    agents: Sequence[Agent],
    start: tuple[str, str, str | None],
    drive: Drive | None = None,
    *,
    cancelled: bool = False,
    **start_options: Any,
) -> str:
    """Run `start`'s (agent, task, workflow id) on the "record" queue, `drive` it, and return
    its history once it ended (`cancelled`: by a cancel, which fails its result)."""
    agent, task, workflow_id = start
    async with running_worker(client, agents, "record", **start_options.pop("worker", {})):
        handle = await runs.start_run(
            client, agent, task, task_queue="record", workflow_id=workflow_id, **start_options
        )
        if drive is not None:
            await drive(handle)
        with contextlib.suppress(WorkflowFailureError) if cancelled else contextlib.nullcontext():
            await handle.result()
    return (await handle.fetch_history()).to_json()


def approving(
    client: Client, step: str, *, waiting: str = "awaiting_approval", **how: Any
) -> Drive:
    """Approve `step` once the run reaches `waiting`."""

    async def drive(handle: WorkflowHandle[Any, RunResult]) -> None:
        await wait_for_state(client, handle.id, waiting)
        await runs.approve(client, handle.id, step, reviewer="golden", **how)

    return drive


async def cancelling(handle: WorkflowHandle[Any, RunResult]) -> None:
    await handle.cancel()


async def parked_by_a_deploy(
    client: Client,
    original: Agent,
    changed: Agent,
    start: tuple[str, str, str],
    step: str,
    then: Drive | None = None,
) -> WorkflowHandle[Any, RunResult]:
    """Start the run on `original`'s worker until `step` waits for approval; approve it on
    `changed`'s (a deploy changed the tool), where it parks in `tool_changed`; `then` runs
    there before that worker stops."""
    agent, task, workflow_id = start
    async with running_worker(client, [original], "record"):
        handle = await runs.start_run(
            client, agent, task, task_queue="record", workflow_id=workflow_id
        )
        await wait_for_state(client, handle.id, "awaiting_approval")
    async with running_worker(client, [changed], "record"):
        await runs.approve(client, handle.id, step, reviewer="golden")
        await wait_for_state(client, handle.id, "tool_changed")
        if then is not None:
            await then(handle)
    return handle


async def approval(client: Client, workdir: Path) -> str:
    """Parallel pure and read tools, then an approved effect."""
    agent = build_agent(Payments(workdir / "payments.db"), PAY_SCRIPT, approval=True)
    start = ("payer", "pay ada 5", "golden-approval")
    return await recorded(client, [agent], start, approving(client, "t2.tool.1.pay"))


async def notices(client: Client, workdir: Path) -> str:
    """An approval its approvers are told of, reminded of, then told who decided it."""
    from tests.conftest import wait_until
    from waypoint.protocol.notices import NoticePlan
    from waypoint.testing.notices import NoticeReceiver

    plan = NoticePlan(routes={"approver": ["ops"]}, remind_after=timedelta(milliseconds=500))
    receiver = NoticeReceiver(workdir / "inbox.db", plan)
    agent = build_agent(Payments(workdir / "payments.db"), PAY_SCRIPT, approval=True)
    async with running_worker(client, [agent], "record", activities=receiver.activities()):
        handle = await runs.start_run(
            client, "payer", "pay ada 5", task_queue="record", workflow_id="golden-notices"
        )

        async def reminded() -> bool:
            return any(row[2] == "reminder" for row in receiver.inbox())

        await wait_until(reminded, "a reminder came")
        await runs.approve(client, handle.id, "t2.tool.1.pay", reviewer="golden")
        await handle.result()
    return (await handle.fetch_history()).to_json()


async def paused(client: Client, workdir: Path) -> str:
    """Paused as an approval waits, approved while paused, then unpaused: the effect runs."""
    agent = build_agent(Payments(workdir / "payments.db"), PAY_SCRIPT, approval=True)

    async def pause_approve_unpause(handle: WorkflowHandle[Any, RunResult]) -> None:
        await wait_for_state(client, handle.id, "awaiting_approval")
        await runs.pause(client, handle.id, reviewer="golden", reason="incident")
        await runs.approve(client, handle.id, "t2.tool.1.pay", reviewer="golden")
        await wait_for_state(client, handle.id, "paused")
        await runs.unpause(client, handle.id, reviewer="golden")

    start = ("payer", "pay ada 5", "golden-paused")
    return await recorded(client, [agent], start, pause_approve_unpause)


async def reconcile(client: Client, workdir: Path) -> str:
    """A lost reply, a lookup that cannot tell, an operator retry, then a reconciled effect."""
    faults = Faults(lose_response=1, reconcile_unreachable=1)
    agent = build_agent(Payments(workdir / "payments.db", faults), PAY_SCRIPT)

    async def retry(handle: WorkflowHandle[Any, RunResult]) -> None:
        await wait_for_state(client, handle.id, "needs_reconciliation")
        await runs.resolve(client, handle.id, Resolution(step_id="t2.tool.1.pay", action="retry"))

    start = ("payer", "pay", "golden-reconcile")
    return await recorded(client, [agent], start, retry, options=FAST)


async def parallel(client: Client, workdir: Path) -> str:
    """Three tool calls in one reply: read, pure and an effect side by side."""
    script = [
        reply(
            tool_use("weather", city="Oslo"),
            tool_use("add", a=1, b=2),
            tool_use("pay", payee="ada", amount=3),
        ),
        reply(text("done")),
    ]
    agent = build_agent(Payments(workdir / "payments.db"), script)
    return await recorded(client, [agent], ("payer", "fan out", "golden-parallel"))


async def continued(client: Client, workdir: Path) -> str:
    """The first segment of a run that continues-as-new with a compacted transcript."""
    agent = build_agent(
        Payments(workdir / "payments.db"), long_script(15), limits=Limits(max_turns=50)
    )
    async with running_worker(client, [agent], "record"):
        handle = await start_continuing(client, "golden-continued", "record")
        await handle.result()
    first = client.get_workflow_handle("golden-continued", run_id=handle.first_execution_run_id)
    return (await first.fetch_history()).to_json()


async def bounded_carry(client: Client, workdir: Path) -> str:
    """The third segment of a long run: it starts with archived steps and archives more."""
    agent = build_agent(
        Payments(workdir / "payments.db"), long_script(20), limits=Limits(max_turns=50)
    )
    budget = HistoryLimits(max_events=80, keep_recent_turns=2, keep_events=16)
    async with running_worker(client, [agent], "record"):
        handle = await start_bounded(client, "golden-bounded-carry", "record", budget)
        await handle.result()
    run_id = handle.first_execution_run_id
    for _ in range(2):
        events = client.get_workflow_handle(handle.id, run_id=run_id).fetch_history_events()
        async for event in events:
            if event.HasField("workflow_execution_continued_as_new_event_attributes"):
                run_id = (
                    event.workflow_execution_continued_as_new_event_attributes.new_execution_run_id
                )
    third = client.get_workflow_handle(handle.id, run_id=run_id)
    return (await third.fetch_history()).to_json()


async def escalation(client: Client, workdir: Path) -> str:
    """An approval that times out, escalates, reminds, then is approved."""
    from tests.test_long_runs import escalating_agent, notifications

    notes = workdir / "notes.db"
    agent = escalating_agent(Payments(workdir / "payments.db"), notes, "escalate")

    async def approve_after_two_notes(handle: WorkflowHandle[Any, RunResult]) -> None:
        while len(notifications(notes)) < 2:
            await asyncio.sleep(0.05)
        await runs.approve(client, handle.id, "t1.tool.1.pay", reviewer="golden")

    start = ("payer", "pay", "golden-escalation")
    return await recorded(client, [agent], start, approve_after_two_notes)


async def thinking_stops(client: Client, workdir: Path) -> str:
    """Thinking kept verbatim, a cut-off call re-asked, a paused turn continued, a refusal."""
    thought = ThinkingBlock(thinking="Pay ada 1200.", signature="sig-golden-1")
    hidden = RedactedThinkingBlock(data="ZW5jcnlwdGVk")

    def turn1(request: ModelRequest) -> ModelResponse:
        call = ToolUseBlock(id="", name="pay", input={"payee": "ada", "amount": 12})
        if request.max_tokens < 16_000:
            cut = call.model_copy(update={"invalid": "cut off at max_tokens"})
            return ModelResponse(content=[thought, cut], stop_reason="max_tokens", model="s")
        return ModelResponse(
            content=[
                thought,
                hidden,
                call.model_copy(update={"input": {"payee": "ada", "amount": 1200}}),
            ],
            stop_reason="tool_use",
            model="s",
        )

    paused = ModelResponse(
        content=[TextBlock(text="Checking")], stop_reason="pause_turn", model="s"
    )
    replies = iter([paused, reply(text(" done."))])
    agent = build_agent(Payments(workdir / "payments.db"), [turn1, lambda request: next(replies)])
    agent.settings = ModelSettings(thinking="adaptive", max_output_tokens=16_000)
    return await recorded(client, [agent], ("payer", "pay ada", "golden-thinking"))


async def typed_output(client: Client, workdir: Path) -> str:
    """A typed result: a text answer nudged, an invalid final answer corrected, then valid."""
    from tests.test_typed_output import Receipt, typed_agent

    script = [
        reply(text("Paid ada 5.")),
        reply(final_answer({"payee": "ada", "amount": 0})),
        reply(final_answer(Receipt(payee="ada", amount=5))),
    ]
    agent = typed_agent(workdir, script)
    return await recorded(client, [agent], ("payer", "pay", "golden-typed_output"))


async def streaming(client: Client, workdir: Path) -> str:
    """An approved payment streamed live: a reader long-polls the run's event stream throughout."""
    agent = build_agent(Payments(workdir / "payments.db"), PAY_SCRIPT, approval=True)

    async def read_while_approving(handle: WorkflowHandle[Any, RunResult]) -> None:
        reader = asyncio.create_task(_read_all(client, handle.id))
        await approving(client, "t2.tool.1.pay")(handle)
        await handle.result()
        await reader

    start = ("payer", "pay ada 5", "golden-streaming")
    return await recorded(client, [agent], start, read_while_approving)


async def policy(client: Client, workdir: Path) -> str:
    """Rules allow, deny and ask; the policy changes live; an approval is remembered."""
    from tests.test_policies import POLICY, echo, payer

    script = [
        reply(
            tool_use("balance", name="main"),
            tool_use("pay", payee="ada", amount=500),
            tool_use("pay", payee="bob", amount=5000),
            tool_use("pay", payee="kim", amount=10, country="KP"),
        ),
        reply(tool_use("pay", payee="bob", amount=6000)),
        echo,
    ]
    agent = payer(Payments(workdir / "payments.db"), script, POLICY)

    async def tighten_then_approve(handle: WorkflowHandle[Any, RunResult]) -> None:
        await wait_for_state(client, handle.id, "awaiting_approval")
        stricter = POLICY.model_copy(update={"default": "ask"})
        await set_policy(client, handle.id, stricter, reviewer="golden", reason="audit")
        await runs.approve(client, handle.id, "t1.tool.3.pay", reviewer="golden", remember="tool")

    start = ("treasurer", "pay", "golden-policy")
    return await recorded(client, [agent], start, tighten_then_approve)


async def policy_coerced(client: Client, workdir: Path) -> str:
    """A rule judges the coerced argument: checked on the worker before the policy decides."""
    from tests.test_policies import echo, payer
    from waypoint.protocol.policy import ApprovalPolicy, Condition, Rule

    over = Condition(field="amount", op="gt", value=1000)
    policy = ApprovalPolicy(rules=[Rule(tool="pay", when=[over], action="ask")], default="allow")
    script = [
        reply(tool_use("pay", payee="ada", amount="lots"), tool_use("pay", payee="al", amount=5)),
        reply(tool_use("pay", payee="bob", amount="5000")),
        echo,
    ]
    agent = payer(Payments(workdir / "payments.db"), script, policy)
    start = ("treasurer", "pay", "golden-policy_coerced")
    return await recorded(client, [agent], start, approving(client, "t2.tool.1.pay"))


async def fork(client: Client, workdir: Path) -> str:
    """The first segment of a fork: it loads its source's state, then continues as new."""
    agent = build_agent(Payments(workdir / "payments.db"), PAY_SCRIPT)
    async with running_worker(client, [agent], "record"):
        source = await runs.start_run(
            client, "payer", "pay", task_queue="record", workflow_id="golden-fork-source"
        )
        await source.result()
        forked = await runs.fork(
            client, source.id, 2, task_queue="record", note="again", workflow_id="golden-fork"
        )
        await forked.result()
    first = client.get_workflow_handle("golden-fork", run_id=forked.first_execution_run_id)
    return (await first.fetch_history()).to_json()


async def mcp(client: Client, workdir: Path) -> str:
    """MCP tools from a stdio server: pure and read in parallel, an effect, an isError result."""
    from tests.mcp_app import mcp_agent, stdio_server

    agent = mcp_agent(stdio_server(workdir / "ledger.db"))
    try:
        return await recorded(client, [agent], ("mcp_payer", "pay ada", "golden-mcp"))
    finally:
        await agent.aclose()


async def client_answer(client: Client, workdir: Path) -> str:
    """A client-answered question: a wrong answer refused and recorded, then a fitting one."""
    from tests.client_tool_app import asker
    from waypoint.protocol import ClientAnswer

    agent = asker(workdir / "notes.db")

    async def answer_wrong_then_right(handle: WorkflowHandle[Any, RunResult]) -> None:
        await wait_for_state(client, handle.id, "awaiting_answer")
        step = "t1.tool.1.ask_user"
        await handle.signal("answer", ClientAnswer(step_id=step, result={"choice": "green"}))
        await runs.answer(client, handle.id, step, {"choice": "red"}, reviewer="golden")

    start = ("asker", "pick", "golden-client_answer")
    return await recorded(client, [agent], start, answer_wrong_then_right)


async def subagent(client: Client, workdir: Path) -> str:
    """A sub-agent tool call: the parent starts a child workflow and reads its typed answer."""
    from tests.subagent_agents import build_agents

    agents = build_agents(workdir / "payments.db")
    return await recorded(client, agents, ("buyer", "buy", "golden-subagent"))


async def budget(client: Client, workdir: Path) -> str:
    """A token budget parks the run before a call that may cross it; raising it continues."""
    limits = Limits(max_total_tokens=1)
    agent = build_agent(Payments(workdir / "payments.db"), PAY_SCRIPT, limits=limits)

    async def raise_limits(handle: WorkflowHandle[Any, RunResult]) -> None:
        await wait_for_state(client, handle.id, "limit_reached")
        await handle.signal("raise_limits", Limits(max_total_tokens=10**6))

    return await recorded(client, [agent], ("payer", "pay ada 5", "golden-budget"), raise_limits)


async def signed_decisions(client: Client, workdir: Path) -> str:
    """A signed agent: an unsigned approve refused, a signed one verified, its repeat a no-op."""
    from waypoint._security.signing import load_private_key, load_public_keys, new_key, sign
    from waypoint.protocol import ApprovalDecision

    private, public = new_key()
    agent = build_agent(Payments(workdir / "payments.db"), PAY_SCRIPT, approval=True)
    agent.signed_decisions = True
    keys = load_public_keys(f"golden:{public}")

    async def unsigned_then_signed_twice(handle: WorkflowHandle[Any, RunResult]) -> None:
        status = await wait_for_state(client, handle.id, "awaiting_approval")
        await handle.signal("approve", ApprovalDecision(step_id="t2.tool.1.pay", reviewer="golden"))
        decision = ApprovalDecision(
            step_id="t2.tool.1.pay",
            reviewer="golden",
            arguments_hash=status.pending_approvals[0].arguments_hash,
            decision_id="golden-1",
        )
        chain = await verbs.chain_id(client, handle.id)
        signed = sign(load_private_key(private), handle.id, chain, "approve", decision)
        await handle.execute_update("approve", signed)
        await handle.signal("approve", signed)

    start = ("payer", "pay ada 5", "golden-signed")
    drive = unsigned_then_signed_twice
    return await recorded(client, [agent], start, drive, worker={"decision_keys": keys})


async def agent_queue(client: Client, workdir: Path) -> str:
    """Every step on the agent's own queue: pure and read tools, an effect, a typed answer."""
    from tests.test_typed_output import Receipt, typed_agent

    script = [
        reply(text("Checking."), tool_use("weather", city="Oslo"), tool_use("add", a=2, b=3)),
        reply(tool_use("pay", payee="ada", amount=5)),
        reply(final_answer(Receipt(payee="ada", amount=5))),
    ]
    return await recorded(
        client, [typed_agent(workdir, script)], ("payer", "pay", "golden-agent_queue")
    )


async def cancelled_effect(client: Client, workdir: Path) -> str:
    """A run cancelled while a plain-def effect runs waits for it and records its result."""
    from tests.drain_app import Transfers, build

    started = workdir / "started"
    agents = build(Transfers(workdir / "transfers.db"), started, seconds=2)

    async def cancel_once_started(handle: WorkflowHandle[Any, RunResult]) -> None:
        while not started.exists():
            await asyncio.sleep(0.05)
        await cancelling(handle)

    start = ("thread_sender", "pay ada", "golden-cancel")
    return await recorded(client, agents, start, cancel_once_started, cancelled=True)


async def steered(client: Client, workdir: Path) -> str:
    """A steer cancels the model step in flight, which is asked again with it; a second, sent
    as a signal while an approval waits, goes to the model with the tool's result."""
    from tests.steer_app import TO_BOB, texts
    from waypoint._providers.scripted import ScriptedModel
    from waypoint.protocol import Steer

    def pay(request: ModelRequest) -> ModelResponse:
        payee = "bob" if any(TO_BOB in said for said in texts(request)) else "ada"
        return reply(tool_use("pay", payee=payee, amount=5))

    script = [pay, reply(text("Paid bob 5."))]
    agent = build_agent(Payments(workdir / "payments.db"), script, approval=True)
    model = ScriptedModel(
        {"payer": script}, latency_of=lambda r: 60.0 if r.step_id == "t1.model" else 0.0
    )

    async def steer_twice(handle: WorkflowHandle[Any, RunResult]) -> None:
        while model.calls != ["t1.model"]:
            await asyncio.sleep(0.05)
        await runs.steer(client, handle.id, TO_BOB, reviewer="golden")
        await wait_for_state(client, handle.id, "awaiting_approval")
        await handle.signal("steer", Steer(message="Say when it is done.", reviewer="golden"))
        await runs.approve(client, handle.id, "t1.tool.1.pay", reviewer="golden")

    start = ("payer", "pay ada 5", "golden-steered")
    return await recorded(client, [agent], start, steer_twice, worker={"scripted": model})


async def cancelled_model_step(client: Client, workdir: Path) -> str:
    """A run cancelled while its model step answers: the step is waited for, the run ends."""
    from waypoint._providers.scripted import ScriptedModel

    agent = build_agent(Payments(workdir / "payments.db"), PAY_SCRIPT)
    scripted = ScriptedModel({agent.name: PAY_SCRIPT}, latency=3.0)

    async def cancel_while_it_answers(handle: WorkflowHandle[Any, RunResult]) -> None:
        await wait_for_state(client, handle.id, "running")
        await asyncio.sleep(0.5)  # the model step has started and waits on its slow reply
        await cancelling(handle)

    start = ("payer", "pay", "golden-cancelled_model_step")
    drive, slow = cancel_while_it_answers, {"scripted": scripted}
    return await recorded(client, [agent], start, drive, cancelled=True, worker=slow)


async def cancelled_subagent(client: Client, workdir: Path) -> str:
    """A parent cancelled while its child waits: it adds what the cancelled child spent."""
    from tests.subagent_agents import build_agents
    from tests.test_subagents import wait_for_child

    agents = build_agents(workdir / "payments.db", child_approval=True)

    async def cancel_while_the_child_waits(handle: WorkflowHandle[Any, RunResult]) -> None:
        await wait_for_child(client, f"{handle.id}--t1.tool.1.check_supplier", "awaiting_approval")
        await cancelling(handle)

    start = ("buyer", "buy", "golden-cancelled_subagent")
    return await recorded(client, agents, start, cancel_while_the_child_waits, cancelled=True)


async def tool_changed(client: Client, workdir: Path) -> str:
    """A deploy changes the approved tool under `refuse`: the step parks, and a rollback and
    `resume` run it without asking for approval again."""
    payments = Payments(workdir / "payments.db")
    original = build_agent(payments, PAY_SCRIPT, approval=True)
    changed = with_changed_pay(build_agent(payments, PAY_SCRIPT), payments, "refuse")
    start = ("payer", "pay ada 5", "golden-tool-changed")
    handle = await parked_by_a_deploy(client, original, changed, start, "t2.tool.1.pay")
    async with running_worker(client, [original], "record"):
        await runs.handle(client, handle.id).signal("resume", ResumeRequest(reviewer="golden"))
        await handle.result()
    return (await handle.fetch_history()).to_json()


async def replanned(client: Client, workdir: Path) -> str:
    """A build changes the prompt, the policy (to "allow") and `pay`; `resume --replan` adopts
    the tools only: the next model step has the run's prompt, and its rule asks above 500."""
    from tests.test_replan import ASK_ABOVE_500, CHARGE_742
    from waypoint.protocol.policy import ApprovalPolicy

    payments = Payments(workdir / "payments.db")
    original = build_agent(payments, CHARGE_742)
    original.system, original.policy = "prompt v1", ASK_ABOVE_500
    changed = with_changed_pay(build_agent(payments, CHARGE_742), payments, "refuse")
    changed.system, changed.policy = "prompt v2", ApprovalPolicy(default="allow")

    async def replan_and_approve(handle: WorkflowHandle[Any, RunResult]) -> None:
        await handle.signal("resume", ResumeRequest(reviewer="golden", replan=True))
        await approving(client, "t2.tool.1.pay")(handle)
        await handle.result()

    start = ("payer", "pay acme 742", "golden-replanned")
    drive = replan_and_approve
    handle = await parked_by_a_deploy(client, original, changed, start, "t1.tool.1.pay", drive)
    return (await handle.fetch_history()).to_json()


async def fresh_reads(client: Client, workdir: Path) -> str:
    """A `fresh_for` screen goes stale while the approval waits: read again, it changed, so the
    approved effect is refused and the model decides again (clock steps date every read)."""
    from tests.test_freshness import WINDOW, vendor_agent

    sanctions = workdir / "sanctions.txt"
    sanctions.write_text("Acme Shell Co\n")
    agent = vendor_agent(sanctions, workdir / "vendors.db", WINDOW)

    async def sanction_then_approve(handle: WorkflowHandle[Any, RunResult]) -> None:
        pending = await the_pending_approval(client, handle.id)
        sanctions.write_text("Acme Shell Co\nNorthwind\n")
        await asyncio.sleep(WINDOW.total_seconds() * 2)  # workflow time passes the window
        await runs.approve(client, handle.id, pending.step_id, reviewer="officer")

    start = (agent.name, "onboard Northwind", None)
    return await recorded(client, [agent], start, sanction_then_approve)


async def local_turn(client: Client, workdir: Path) -> str:
    """`durability="turn"`: each reply's 8 reads run as local activities, the payment as a step."""
    from tests.test_durability import reader

    agent = reader(workdir / "calls.db", "turn")
    return await recorded(client, [agent], (agent.name, "go", None))


async def waiting_handover(client: Client, workdir: Path) -> str:
    """The middle segment of a run flooded as an approval waits: it goes on waiting where the
    first handed over, asks its size as steers and refused signals come, and hands over again."""
    from tests.test_waiting_handover import BUDGET, segments, until_handed_over

    agent = build_agent(Payments(workdir / "payments.db"), PAY_SCRIPT, approval=True)
    async with running_worker(client, [agent], "record"):
        handle = await start_continuing(
            client, "golden-waiting-handover", "record", "payer", "pay ada 5", BUDGET
        )
        await wait_for_state(client, handle.id, "awaiting_approval")
        first = (await handle.describe()).run_id
        await until_handed_over(handle, first, client)
        await until_handed_over(handle, (await handle.describe()).run_id, client)
        await runs.approve(client, handle.id, "t2.tool.1.pay", reviewer="golden")
        await handle.result()
    middle, _ = (await segments(client, handle))[-2]
    return (await client.get_workflow_handle(handle.id, run_id=middle).fetch_history()).to_json()


async def parked_handover(client: Client, workdir: Path) -> str:
    """The middle segment of a run flooded as an unclear effect waits for `resolve`: it goes
    back to the wait without running the effect, asks its size as refused signals come, and
    hands over again."""
    from tests.test_parked_handover import SMALL, UNCLEAR, handed_over
    from tests.test_waiting_handover import segments

    faults = Faults(lose_response=1, reconcile_unreachable=1)
    agent = build_agent(Payments(workdir / "payments.db", faults), PAY_SCRIPT)
    async with running_worker(client, [agent], "record"):
        handle = await runs.start_run(
            client, "payer", "pay", task_queue="record", workflow_id="golden-parked", **SMALL
        )
        await wait_for_state(client, handle.id, UNCLEAR)
        first = (await handle.describe()).run_id or ""
        await handed_over(handle, await handed_over(handle, first))
        await runs.resolve(client, handle.id, Resolution(step_id="t2.tool.1.pay", action="retry"))
        await handle.result()
    middle, _ = (await segments(client, handle))[-2]
    return (await client.get_workflow_handle(handle.id, run_id=middle).fetch_history()).to_json()


async def _read_all(client: Client, run: str) -> int:
    return sum([1 async for _ in runs.events(client, run)])


RECORDERS: dict[str, Callable[[Client, Path], Awaitable[str]]] = {
    "approval": approval,
    "reconcile": reconcile,
    "parallel": parallel,
    "continued": continued,
    "bounded_carry": bounded_carry,
    "escalation": escalation,
    "thinking_stops": thinking_stops,
    "typed_output": typed_output,
    "streaming": streaming,
    "policy": policy,
    "signed_decisions": signed_decisions,
    "policy_coerced": policy_coerced,
    "fork": fork,
    "mcp": mcp,
    "client_answer": client_answer,
    "subagent": subagent,
    "budget": budget,
    "agent_queue": agent_queue,
    "cancelled_effect": cancelled_effect,
    "steered": steered,
    "cancelled_model_step": cancelled_model_step,
    "cancelled_subagent": cancelled_subagent,
    "tool_changed": tool_changed,
    "replanned": replanned,
    "fresh_reads": fresh_reads,
    "local_turn": local_turn,
    "paused": paused,
    "notices": notices,
    "waiting_handover": waiting_handover,
    "parked_handover": parked_handover,
}


async def main(rerecord: bool) -> None:
    temporal = Path(sys.executable).parent / "temporal"
    todo = {
        n: r for n, r in RECORDERS.items() if rerecord or not (HISTORIES / f"{n}.json").exists()
    }
    async with await WorkflowEnvironment.start_local(
        dev_server_existing_path=str(temporal),
        data_converter=pydantic_data_converter,
        search_attributes=sa.ALL,
    ) as env:
        for name, record in todo.items():
            with tempfile.TemporaryDirectory() as tmp:
                history = await record(env.client, Path(tmp))
            (HISTORIES / f"{name}.json").write_text(history)
            print(f"wrote {HISTORIES / name}.json")


if __name__ == "__main__":
    asyncio.run(main("--all" in sys.argv))
