"""Decisions a person sends: counted once by their id, signed when the agent asks for it, and
never let past an ask by a number that has no order."""

from __future__ import annotations

import asyncio
import math
import os
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from temporalio.client import (
    Client,
    Interceptor,
    OutboundInterceptor,
    StartWorkflowUpdateInput,
    WorkflowUpdateHandle,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.testing import WorkflowEnvironment

from tests.agents import PAY_SCRIPT, Payments, build_agent
from tests.cli import waypoint
from tests.conftest import Claude, payer_run, running_worker, wait_for_state
from tests.fake_messages_api import FakeMessagesAPI, text, tool_use
from waypoint._agent import Agent
from waypoint._security.signing import load_private_key, load_public_keys, new_key, sign
from waypoint._tools import ToolContext, tool
from waypoint.client import decisions, runs, verbs
from waypoint.client.runs import start_run
from waypoint.errors import DecisionKeyError, DecisionRefusedError
from waypoint.protocol import ApprovalDecision, ModelSettings, RunStatus
from waypoint.protocol.policy import ApprovalPolicy, Condition, Rule

STEP = "t2.tool.1.pay"
STRICT = ApprovalPolicy(rules=[Rule(tool="pay", action="ask")])

# --- NaN and infinity against ordered policy rules --------------------------------------------


def test_a_nan_argument_matches_ask_and_deny_rules_but_never_allow() -> None:
    ask_big = ApprovalPolicy(
        rules=[Rule(tool="pay", action="ask", when=[Condition(field="tip", op="gt", value=50)])],
        default="allow",
    )
    allow_small = ApprovalPolicy(
        rules=[Rule(tool="pay", action="allow", when=[Condition(field="tip", op="lt", value=5)])],
        default="ask",
    )
    for odd in (math.nan, math.inf, -math.inf):
        asked = ask_big.judge("pay", "effect", {"tip": odd})
        assert asked is not None and asked.action == "ask", odd
        fallback = allow_small.judge("pay", "effect", {"tip": odd})
        assert fallback is not None and fallback.by == "policy: default ask", odd


def test_a_policy_threshold_must_be_a_finite_number() -> None:
    for odd in (math.nan, math.inf):
        try:
            Condition(field="tip", op="gt", value=odd)
        except ValueError as err:
            assert "finite" in str(err)
        else:
            raise AssertionError(f"a {odd} threshold was accepted")


class Tipped(BaseModel):
    payee: str
    tip: float | None = None


async def test_a_nan_from_the_model_is_refused_not_run_past_an_ask_rule(
    client: Client, task_queue: str, tmp_path: Path, claude: Claude
) -> None:
    """JSON has no NaN, but parsers accept it; at the Temporal boundary it would become null,
    which no threshold matches, and the payment would run with no one asked."""
    payments = Payments(tmp_path / "p.db")

    @tool("effect", idempotent=True)
    async def pay(args: Tipped, ctx: ToolContext) -> dict:
        """Pay someone, with a tip."""
        assert ctx.effect_key
        return payments.pay(ctx.effect_key, args.payee, int(args.tip or 0))

    agent = Agent(
        name="payer",
        model="claude-sonnet-4-6",
        system="You pay people.",
        tools=[pay],
        policy=ApprovalPolicy(
            rules=[
                Rule(tool="pay", action="ask", when=[Condition(field="tip", op="gt", value=50)])
            ],
            default="allow",
        ),
        settings=ModelSettings(cache="off"),
    )
    with FakeMessagesAPI() as api:
        api.enqueue_message(tool_use("pay", {"payee": "ada", "tip": math.nan}))
        api.enqueue_message(text("Could not pay."))
        async with running_worker(client, [agent], task_queue, claude=claude(api)):
            handle = await start_run(client, "payer", "pay ada", task_queue=task_queue)
            result = await asyncio.wait_for(handle.result(), 60)
        second = api.message_requests[1].body["messages"][-1]["content"][0]
    assert payments.count() == 0
    step = next(r for r in result.ledger if r.step_id == "t1.tool.1.pay")
    assert step.status == "error" and "non-finite number at tip" in step.summary
    assert second["is_error"] and "send a finite number" in str(second["content"])


# --- one decision, one effect: ids make a repeat a recorded no-op -----------------------------


class _LoseUpdateAnswers(OutboundInterceptor):
    async def start_workflow_update(
        self, input: StartWorkflowUpdateInput
    ) -> WorkflowUpdateHandle[Any]:
        handle = await super().start_workflow_update(input)
        await handle.result()  # the run applied it...
        raise WorkflowUpdateRPCTimeoutOrCancelledError()  # ...but the sender never heard


class LoseUpdateAnswers(Interceptor):
    """Every Update is applied, and its answer lost on the way back, as on a flaky network."""

    def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
        return _LoseUpdateAnswers(next)


def lossy(client: Client) -> Client:
    return Client(
        client.service_client,
        namespace=client.namespace,
        data_converter=client.data_converter,
        interceptors=[LoseUpdateAnswers()],
    )


async def test_a_decision_whose_update_answer_was_lost_and_is_resent_as_a_signal_counts_once(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    payments = Payments(tmp_path / "p.db")
    flaky = lossy(client)
    async with payer_run(client, task_queue, payments) as handle:
        await wait_for_state(client, handle.id, "awaiting_approval")
        sent = await decisions.set_policy(
            flaky, handle.id, STRICT, reviewer="lin", decision_id="policy-once"
        )
        assert not sent.recorded  # the update's answer was lost: the signal went after it
        approved = await runs.approve(
            flaky, handle.id, STEP, reviewer="grace", decision_id="approve-once"
        )
        assert not approved.recorded
        result = await handle.result()
        view = await decisions.show_policy(client, handle.id)
        status = await handle.query("status", result_type=RunStatus)
    assert payments.count() == 1
    assert view.changes == 1 and view.policy == STRICT
    assert [r.step_id for r in result.ledger if ".policy." in r.step_id] == ["t2.policy.1"]
    duplicates = {(i.signal, i.reason) for i in status.ignored_signals}
    assert duplicates == {
        (
            "set_policy",
            "duplicate: decision policy-once was already applied (t2.policy.1); nothing changed",
        ),
        (
            "approve",
            f"duplicate: decision approve-once was already applied ({STEP}); nothing changed",
        ),
    }


# --- signed decisions -------------------------------------------------------------------------


async def until_ignored(client: Client, run: str, n: int, timeout: float = 20) -> RunStatus:
    """The run's status once it has recorded `n` ignored signals (some wait for an activity)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        status = await runs.status(client, run)
        if len(status.ignored_signals) >= n:
            return status
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"expected {n} ignored signals: {status.ignored_signals}")
        await asyncio.sleep(0.05)


def signed_agent(payments: Payments) -> Agent:
    agent = build_agent(payments, PAY_SCRIPT, approval=True)
    agent.signed_decisions = True
    return agent


def test_a_worker_for_a_signed_agent_needs_reviewer_keys(client: Client, tmp_path: Path) -> None:
    with pytest.raises(DecisionKeyError, match="WAYPOINT_DECISION_KEYS"):
        from waypoint._worker import build_worker

        build_worker(client, [signed_agent(Payments(tmp_path / "p.db"))])


async def test_a_signed_agent_refuses_and_records_unsigned_forged_and_replayed_decisions(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    payments = Payments(tmp_path / "p.db")
    grace, grace_public = new_key()
    mallory, _ = new_key()
    keys = load_public_keys(f"grace:{grace_public}")
    async with running_worker(client, [signed_agent(payments)], task_queue, decision_keys=keys):
        handle = await start_run(client, "payer", "pay ada 5", task_queue=task_queue)
        status = await wait_for_state(client, handle.id, "awaiting_approval")
        (pending,) = status.pending_approvals

        async def approve(**how: Any) -> None:
            await runs.approve(client, handle.id, STEP, reviewer="grace", **how)

        with pytest.raises(DecisionRefusedError, match="unsigned approve"):
            await approve()
        with pytest.raises(
            DecisionRefusedError, match="does not verify with the public key of reviewer 'grace'"
        ):
            await approve(signing_key=load_private_key(mallory))
        with pytest.raises(DecisionRefusedError, match="unsigned set_policy"):
            await decisions.set_policy(
                client, handle.id, ApprovalPolicy(default="allow"), reviewer="grace"
            )
        # A real signature of a reject, replayed as an approve, by raw signal
        reject = ApprovalDecision(
            step_id=STEP, reviewer="grace", arguments_hash=pending.arguments_hash, decision_id="r1"
        )
        chain = await verbs.chain_id(client, handle.id)
        forged = sign(load_private_key(grace), handle.id, chain, "reject", reject)
        await handle.signal("approve", forged)
        await handle.signal("approve", ApprovalDecision(step_id=STEP, reviewer="grace"))
        status = await until_ignored(client, handle.id, 5)
        assert status.state == "awaiting_approval" and payments.count() == 0
        sent = await runs.approve(
            client,
            handle.id,
            STEP,
            reviewer="grace",
            signing_key=load_private_key(grace),
        )
        assert sent.recorded
        assert sent.decided_by == f"grace (signed; {client.identity})"
        result = await handle.result()
    assert payments.count() == 1
    assert next(r for r in result.ledger if r.step_id == STEP).status == "completed"
    forged = "the signature does not verify with the public key of reviewer 'grace' for this "
    reasons = sorted(
        (i.signal, "forged" if i.reason.startswith(forged) else i.reason.split(":")[0])
        for i in status.ignored_signals
    )
    assert reasons == [
        ("approve", "forged"),  # mallory's key
        ("approve", "forged"),  # grace's reject replayed as an approve
        ("approve", "unsigned approve"),  # by update: refused, and recorded too
        ("approve", "unsigned approve"),  # by signal
        ("set_policy", "unsigned set_policy"),
    ]


async def test_the_cli_signs_decisions_with_the_reviewers_key(
    env: WorkflowEnvironment, client: Client, task_queue: str, tmp_path: Path
) -> None:
    payments = Payments(tmp_path / "p.db")
    made = waypoint(dict(os.environ), "decision-key", "grace")
    assert made.returncode == 0, made.stderr
    private_line, public_line = made.stdout.split()
    assert private_line.startswith("WAYPOINT_DECISION_KEY=") and public_line.startswith("grace:")
    cli_env = {
        **os.environ,
        "TEMPORAL_ADDRESS": env.client.service_client.config.target_host,
        "TEMPORAL_NAMESPACE": "default",
        "WAYPOINT_PAYLOAD_STORE": "off",
        "PYTHONPATH": str(Path(__file__).parent.parent),
    }
    keys = load_public_keys(public_line)
    async with running_worker(client, [signed_agent(payments)], task_queue, decision_keys=keys):
        handle = await start_run(client, "payer", "pay ada 5", task_queue=task_queue)
        await wait_for_state(client, handle.id, "awaiting_approval")
        unsigned = await asyncio.to_thread(
            waypoint, cli_env, "approve", handle.id, STEP, "--reviewer", "grace"
        )
        assert unsigned.returncode == 1 and "unsigned approve" in unsigned.stderr
        key = private_line.split("=", 1)[1]
        signed = await asyncio.to_thread(
            waypoint,
            {**cli_env, "WAYPOINT_DECISION_KEY": key},
            "approve",
            handle.id,
            STEP,
            "--reviewer",
            "grace",
        )
        assert signed.returncode == 0, signed.stderr
        assert "recorded by grace (signed; " in signed.stdout
        await handle.result()
    assert payments.count() == 1
