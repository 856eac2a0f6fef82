"""Approval policies: rules that allow, deny or ask; remembered approvals; live changes."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, Field, ValidationError
from temporalio.client import Client, WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from tests.agents import Payments
from tests.conftest import running_worker, start_continuing, wait_for_count, wait_for_state
from waypoint._agent import Agent
from waypoint._tools import ToolContext, tool
from waypoint.client import runs
from waypoint.client.decisions import set_policy, show_policy
from waypoint.errors import ToolDefinitionError
from waypoint.protocol import (
    Limits,
    ModelRequest,
    ModelResponse,
    RunResult,
    RunStatus,
    StepRecord,
    text_of,
)
from waypoint.protocol.policy import (
    ApprovalPolicy,
    Condition,
    PolicyChange,
    Remembered,
    Rule,
    verdict_for,
)
from waypoint.testing import Script, last_tool_results, reply, text, tool_use

BIN = Path(sys.executable).parent
ROOT = Path(__file__).parent.parent

SANCTIONED = ["KP", "IR", "SY"]
POLICY = ApprovalPolicy(
    rules=[
        Rule(
            tool="pay", when=[Condition(field="country", op="in", value=SANCTIONED)], action="deny"
        ),
        Rule(
            tool="pay",
            when=[
                Condition(field="amount", op="gt", value=1000),
                Condition(field="currency", op="eq", value="EUR"),
            ],
            action="ask",
        ),
        Rule(kind="read", action="allow"),
    ],
    default="allow",
)

# The example of docs/approvals.md, verbatim.
team_policy = ApprovalPolicy(
    rules=[
        Rule(
            tool="pay", action="deny", when=[Condition(field="country", op="in", value=SANCTIONED)]
        ),
        Rule(
            tool="pay",
            action="ask",
            when=[
                Condition(field="amount", op="gt", value=1000),
                Condition(field="currency", op="eq", value="EUR"),
            ],
        ),
        Rule(kind="read", action="allow"),
    ],
    default="allow",
)
ASK_PAY = ApprovalPolicy(rules=[Rule(tool="pay", action="ask")])


class Transfer(BaseModel):
    payee: str
    amount: int = Field(gt=0)
    currency: str = "EUR"
    country: str = "NO"


class Account(BaseModel):
    name: str


def payer(
    payments: Payments,
    script: Script,
    policy: ApprovalPolicy | None,
    *,
    approval: bool = False,
    max_turns: int = 20,
) -> Agent:
    """An agent with a read tool and a payment whose rows land in SQLite."""

    @tool("read")
    async def balance(args: Account) -> str:
        """Read an account's balance."""
        return f"{args.name}: 10000 EUR"

    @tool("effect", idempotent=True, requires_approval=approval)
    async def pay(args: Transfer, ctx: ToolContext) -> dict:
        """Pay someone."""
        assert ctx.effect_key
        return payments.pay(ctx.effect_key, args.payee, args.amount)

    return Agent(
        name="treasurer",
        model="claude-sonnet-4-6",
        system="You pay people under a policy.",
        tools=[balance, pay],
        script=script,
        policy=policy,
        limits=Limits(max_turns=max_turns),
    )


@asynccontextmanager
async def treasurer_waiting(
    client: Client, task_queue: str, agent: Agent
) -> AsyncIterator[tuple[WorkflowHandle[Any, RunResult], RunStatus]]:
    """The treasurer's run on "pay", on a worker of its own, once it waits for an approval."""
    async with running_worker(client, [agent], task_queue):
        handle = await runs.start_run(client, "treasurer", "pay", task_queue=task_queue)
        yield handle, await wait_for_state(client, handle.id, "awaiting_approval")


def paid(payments: Payments, payee: str) -> int:
    with sqlite3.connect(payments.path) as db:
        return db.execute("SELECT COUNT(*) FROM payments WHERE payee = ?", (payee,)).fetchone()[0]


def step(ledger: list[StepRecord], step_id: str) -> StepRecord:
    return next(r for r in ledger if r.step_id == step_id)


def one_payment_a_turn(*payments: tuple[str, int]) -> Script:
    """A script paying each `(payee, amount)` in a turn of its own, then saying "done"."""
    turns = [reply(tool_use("pay", payee=payee, amount=amount)) for payee, amount in payments]
    return [*turns, reply(text("done"))]


def echo(request: ModelRequest) -> ModelResponse:
    """The last reply: every tool result the model got, one per line."""
    return reply(text("\n".join(text_of(r.content) for r in last_tool_results(request))))


# --- the matcher -----------------------------------------------------------------------------


def test_first_matching_rule_wins_and_names_itself() -> None:
    sanctioned = POLICY.judge("pay", "effect", {"amount": 5000, "currency": "EUR", "country": "KP"})
    assert sanctioned is not None and sanctioned.action == "deny"
    assert sanctioned.by == "policy: rule 1 (pay country in ['KP', 'IR', 'SY'] -> deny)"
    large = POLICY.judge("pay", "effect", {"amount": 5000, "currency": "EUR", "country": "NO"})
    assert large is not None and large.action == "ask"
    assert large.by == "policy: rule 2 (pay amount > 1000 and currency == 'EUR' -> ask)"
    usd = POLICY.judge("pay", "effect", {"amount": 5000, "currency": "USD", "country": "NO"})
    assert usd is not None and (usd.action, usd.by) == ("allow", "policy: default allow")
    read = POLICY.judge("balance", "read", {"name": "main"})
    assert read is not None and read.by == "policy: rule 3 (kind read -> allow)"
    assert ApprovalPolicy(rules=POLICY.rules).judge("pay", "effect", {"amount": 1}) is None


@pytest.mark.parametrize(
    ("op", "value", "found", "expected"),
    [
        ("eq", "EUR", "EUR", True),
        ("ne", "EUR", "EUR", False),
        ("gt", 1000, 1000, False),
        ("ge", 1000, 1000, True),
        ("lt", 1000, 999.5, True),
        ("le", 1000, 1001, False),
        ("in", ["KP"], "KP", True),
        ("not_in", ["KP"], "KP", False),
        ("glob", "acme-*", "acme-oslo", True),
        ("glob", "acme-*", "other", False),
        ("gt", 1000, "5000", False),  # a string is never compared with a number
        ("gt", 0, True, False),  # nor is a boolean
        ("glob", "*", 5, False),
    ],
)
def test_condition_operators(op: str, value: object, found: object, expected: bool) -> None:
    condition = Condition(field="x", op=op, value=value)  # type: ignore[arg-type]
    assert condition.matches({"x": found}) is expected


def test_the_readme_example_decides_as_it_says() -> None:
    verdict = team_policy.judge("pay", "effect", {"amount": 5000, "currency": "EUR"})
    assert verdict is not None and verdict.action == "ask"
    assert verdict.by == "policy: rule 2 (pay amount > 1000 and currency == 'EUR' -> ask)"
    assert team_policy.model_dump() == POLICY.model_dump()


def test_a_missing_or_nested_field() -> None:
    nested = Condition(field="invoice.total", op="gt", value=10)
    assert nested.matches({"invoice": {"total": 11}})
    assert not nested.matches({"invoice": {}})
    assert not nested.matches({"invoice": 3})
    assert not Condition(field="amount", op="ne", value=5).matches({})


def test_policies_are_data_that_refuse_nonsense() -> None:
    with pytest.raises(ValidationError):
        Condition(field="country", op="in", value="KP")
    with pytest.raises(ValidationError):
        Rule.model_validate({"action": "maybe"})
    with pytest.raises(ValidationError):
        ApprovalPolicy.model_validate({"rules": [{"action": "allow", "eval": "os.system"}]})
    again = ApprovalPolicy.model_validate_json(POLICY.model_dump_json())
    assert again == POLICY and again.digest() == POLICY.digest()
    assert ASK_PAY.digest() != POLICY.digest()


def test_remembered_approvals_answer_asks_but_never_lift_a_deny() -> None:
    tool_wide = [Remembered(tool="pay", by="grace")]
    exact = [Remembered(tool="pay", arguments={"amount": 5}, by="grace")]
    deny_kp = ApprovalPolicy(rules=POLICY.rules[:1], default="ask")
    denied = verdict_for(deny_kp, tool_wide, "pay", "effect", {"country": "KP"}, False)
    assert denied is not None and denied.action == "deny"
    allowed = verdict_for(deny_kp, tool_wide, "pay", "effect", {"country": "NO"}, False)
    assert allowed is not None and allowed.remembered and allowed.by == "remembered: grace"
    assert verdict_for(None, exact, "pay", "effect", {"amount": 5}, True).action == "allow"  # type: ignore[union-attr]
    assert verdict_for(None, exact, "pay", "effect", {"amount": 6}, True) is None
    assert verdict_for(None, exact, "pay", "effect", {"amount": 5}, False) is None


def test_a_rule_naming_no_tool_of_the_agent_is_refused(tmp_path: Path) -> None:
    typo = ApprovalPolicy(rules=[Rule(tool="pya", action="deny")])
    with pytest.raises(ToolDefinitionError, match="names no tool"):
        payer(Payments(tmp_path / "p.db"), [], typo)


# --- on the dev server -----------------------------------------------------------------------


async def test_each_example_rule_decides_and_the_ledger_says_which(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    payments = Payments(tmp_path / "payments.db")
    script: Script = [
        reply(
            tool_use("balance", name="main"),
            tool_use("pay", payee="ada", amount=500),
            tool_use("pay", payee="bob", amount=5000),
            tool_use("pay", payee="kim", amount=10, country="KP"),
            tool_use("pay", payee="usd", amount=5000, currency="USD"),
        ),
        echo,
    ]
    agent = payer(payments, script, POLICY)
    async with treasurer_waiting(client, task_queue, agent) as (handle, status):
        assert [p.step_id for p in status.pending_approvals] == ["t1.tool.3.pay"]
        await wait_for_count(payments, 2)
        await runs.approve(client, handle.id, "t1.tool.3.pay", reviewer="grace")
        result = await handle.result()
    assert (paid(payments, "ada"), paid(payments, "bob"), paid(payments, "usd")) == (1, 1, 1)
    assert paid(payments, "kim") == 0  # the deny path never ran the tool
    ledger = result.ledger
    assert step(ledger, "t1.tool.1.balance").decided_by == "policy: rule 3 (kind read -> allow)"
    assert step(ledger, "t1.tool.2.pay").decided_by == "policy: default allow"
    asked = step(ledger, "t1.tool.3.pay")  # the rule asked, a person decided: both recorded
    assert asked.decided_by == f"grace ({client.identity})"
    assert asked.rule == "policy: rule 2 (pay amount > 1000 and currency == 'EUR' -> ask)"
    denied = step(ledger, "t1.tool.4.pay")
    assert denied.status == "rejected" and denied.decided_by is not None
    assert denied.decided_by.startswith("policy: rule 1 (pay country in")
    assert denied.decided_at
    assert step(ledger, "t1.tool.5.pay").decided_by == "policy: default allow"
    assert "denied by policy: rule 1" in result.output and "not executed" in result.output


async def test_a_rule_judges_the_coerced_argument_so_a_string_amount_cannot_walk_around_it(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    payments = Payments(tmp_path / "payments.db")
    over = Condition(field="amount", op="gt", value=1000)
    policy = ApprovalPolicy(rules=[Rule(tool="pay", when=[over], action="ask")], default="allow")
    script: Script = [
        reply(tool_use("pay", payee="ada", amount="lots")),
        reply(tool_use("pay", payee="bob", amount="5000")),
        echo,
    ]
    agent = payer(payments, script, policy)
    async with treasurer_waiting(client, task_queue, agent) as (handle, status):
        (pending,) = status.pending_approvals
        assert pending.step_id == "t2.tool.1.pay" and payments.count() == 0
        # The reviewer sees, and the hash binds, the value the tool will get: 5000, a number.
        assert pending.arguments == {
            "payee": "bob",
            "amount": 5000,
            "currency": "EUR",
            "country": "NO",
        }
        await runs.approve(client, handle.id, "t2.tool.1.pay", reviewer="grace")
        result = await handle.result()
    malformed = step(result.ledger, "t1.tool.1.pay")
    assert malformed.status == "error" and "Invalid arguments for pay" in malformed.summary
    asked = step(result.ledger, "t2.tool.1.pay")
    assert asked.rule == "policy: rule 1 (pay amount > 1000 -> ask)"
    assert asked.decided_by == f"grace ({client.identity})" and asked.status == "completed"
    assert payments.count() == 1 and payments.find(asked.effect_key or "") == {
        "effect_key": asked.effect_key,
        "payee": "bob",
        "amount": 5000,
    }


async def test_approve_and_remember_the_tool_for_the_rest_of_the_run(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    payments = Payments(tmp_path / "payments.db")
    agent = payer(payments, one_payment_a_turn(("ada", 5), ("bob", 7)), ASK_PAY)
    async with treasurer_waiting(client, task_queue, agent) as (handle, _):
        await runs.approve(client, handle.id, "t1.tool.1.pay", reviewer="grace", remember="tool")
        result = await handle.result()
        view = await show_policy(client, handle.id)
    assert payments.count() == 2
    remembered = step(result.ledger, "t1.tool.1.pay.remember")
    assert remembered.kind == "operator" and remembered.decided_by is not None
    assert remembered.decided_by.startswith("grace")
    assert "every call" in remembered.summary
    auto = step(result.ledger, "t2.tool.1.pay").decided_by
    assert auto is not None and auto.startswith("remembered: grace") and "t1.tool.1.pay" in auto
    assert view.source == "spec" and [m.tool for m in view.remembered] == ["pay"]


async def test_remember_the_exact_arguments_covers_only_them(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    payments = Payments(tmp_path / "payments.db")
    script = one_payment_a_turn(("ada", 5), ("ada", 5), ("bob", 5))
    agent = payer(payments, script, None, approval=True)  # no policy: the tool always asks
    async with treasurer_waiting(client, task_queue, agent) as (handle, _):
        await runs.approve(client, handle.id, "t1.tool.1.pay", reviewer="grace", remember="args")
        await wait_for_count(payments, 2)
        status = await wait_for_state(client, handle.id, "awaiting_approval")
        assert [p.step_id for p in status.pending_approvals] == ["t3.tool.1.pay"]
        await runs.approve(client, handle.id, "t3.tool.1.pay", reviewer="grace")
        result = await handle.result()
    assert payments.count() == 3
    assert "these arguments" in step(result.ledger, "t1.tool.1.pay.remember").summary
    assert (step(result.ledger, "t2.tool.1.pay").decided_by or "").startswith("remembered:")


async def test_live_policy_change_by_update_is_recorded_and_applies_next(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    payments = Payments(tmp_path / "payments.db")
    script: Script = [
        reply(tool_use("pay", payee="ada", amount=5)),
        reply(tool_use("pay", payee="bob", amount=5000), tool_use("pay", payee="cy", amount=9)),
        echo,
    ]
    stricter = ApprovalPolicy(
        rules=[
            Rule(tool="pay", when=[Condition(field="amount", op="gt", value=1000)], action="deny")
        ],
        default="allow",
    )
    agent = payer(payments, script, ASK_PAY)
    async with treasurer_waiting(client, task_queue, agent) as (handle, _):
        sent = await set_policy(client, handle.id, stricter, reviewer="lin", reason="audit")
        assert sent.recorded and sent.step_id == "t1.policy.1"
        assert sent.decided_by == f"lin ({client.identity})"
        view = await show_policy(client, handle.id)
        assert (view.source, view.changes, view.policy) == ("changed", 1, stricter)
        assert view.digest == stricter.digest()
        await runs.approve(client, handle.id, "t1.tool.1.pay", reviewer="grace")
        result = await handle.result()
    assert (paid(payments, "ada"), paid(payments, "bob"), paid(payments, "cy")) == (1, 0, 1)
    change = step(result.ledger, "t1.policy.1")
    assert change.kind == "operator" and change.input_hash == stricter.digest()
    assert "audit" in change.summary and stricter.digest()[:12] in change.summary
    assert (step(result.ledger, "t2.tool.1.pay").decided_by or "").startswith("policy: rule 1")
    assert step(result.ledger, "t2.tool.2.pay").decided_by == "policy: default allow"


async def test_live_policy_change_by_cli_and_approve_remember_flag(
    env: WorkflowEnvironment, client: Client, task_queue: str, tmp_path: Path
) -> None:
    payments = Payments(tmp_path / "payments.db")
    script: Script = [
        reply(tool_use("pay", payee="ada", amount=5)),
        reply(tool_use("pay", payee="kim", amount=5, country="KP")),
        reply(tool_use("pay", payee="bob", amount=6)),
        echo,
    ]
    policy_file = tmp_path / "policy.json"
    policy_file.write_text(
        json.dumps(
            {
                "rules": [
                    {
                        "tool": "pay",
                        "when": [{"field": "country", "op": "in", "value": SANCTIONED}],
                        "action": "deny",
                    },
                    {"tool": "pay", "action": "ask"},
                ]
            }
        )
    )
    cli_env = {
        **os.environ,
        "TEMPORAL_ADDRESS": env.client.service_client.config.target_host,
        "TEMPORAL_NAMESPACE": "default",
        "PYTHONPATH": str(ROOT),
    }

    async def waypoint(*args: str) -> tuple[int, str, str]:
        proc = await asyncio.create_subprocess_exec(
            str(BIN / "waypoint"),
            *args,
            env=cli_env,
            cwd=ROOT,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(), 60)
        return proc.returncode or 0, out.decode(), err.decode()

    agent = payer(payments, script, ASK_PAY)
    async with treasurer_waiting(client, task_queue, agent) as (handle, _):
        code, out, err = await waypoint(
            "policy", handle.id, "set", "--file", str(policy_file), "--reviewer", "lin"
        )
        assert code == 0, err
        assert "policy set t1.policy.1" in out and "recorded by lin" in out
        sent = ApprovalPolicy.model_validate_json(policy_file.read_text())
        assert f"2 rules, sha256 {sent.digest()[:12]}" in out  # which file was sent
        code, out, err = await waypoint("policy", handle.id, "show")
        assert code == 0, err
        shown = json.loads(out)
        assert shown["source"] == "changed" and len(shown["policy"]["rules"]) == 2
        code, out, err = await waypoint(
            "approve", handle.id, "t1.tool.1.pay", "--remember", "tool", "--reviewer", "grace"
        )
        assert code == 0, err
        result = await handle.result()
        bad = await waypoint("policy", handle.id, "set", "--file", str(tmp_path / "none.json"))
    assert (paid(payments, "ada"), paid(payments, "kim"), paid(payments, "bob")) == (1, 0, 1)
    assert step(result.ledger, "t1.policy.1").decided_by.startswith("lin")  # type: ignore[union-attr]
    assert (step(result.ledger, "t2.tool.1.pay").decided_by or "").startswith("policy: rule 1")
    assert (step(result.ledger, "t3.tool.1.pay").decided_by or "").startswith("remembered: grace")
    assert bad[0] == 1 and "error:" in bad[2] and "Traceback" not in bad[2]


async def test_policy_set_by_signal_survives_continue_as_new(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    payments = Payments(tmp_path / "payments.db")
    turns = 14
    script: Script = [reply(tool_use("pay", payee="p1", amount=1))]
    for turn in range(2, turns):
        script.append(
            reply(
                tool_use("balance", name=f"a{turn}"), tool_use("pay", payee=f"p{turn}", amount=turn)
            )
        )
    script.append(reply(tool_use("pay", payee="big", amount=5000)))
    script.append(echo)
    stricter = ApprovalPolicy(
        rules=[
            Rule(tool="pay", when=[Condition(field="amount", op="gt", value=1000)], action="deny"),
            Rule(tool="pay", action="ask"),
        ]
    )
    agent = payer(payments, script, ASK_PAY, max_turns=50)
    async with running_worker(client, [agent], task_queue):
        handle = await start_continuing(
            client, f"policy-can-{task_queue}", task_queue, agent="treasurer", task="pay many"
        )
        await wait_for_state(client, handle.id, "awaiting_approval")
        await handle.signal("set_policy", {"policy": {"rules": "nope"}})
        await handle.signal("set_policy", PolicyChange(policy=stricter, reviewer="lin"))
        await runs.approve(client, handle.id, "t1.tool.1.pay", reviewer="grace", remember="tool")
        result = await handle.result()
        latest = await client.get_workflow_handle(handle.id).describe()
        status = await client.get_workflow_handle(handle.id).query("status", result_type=RunStatus)
        status_ignored = status.ignored_signals
    assert latest.run_id != handle.first_execution_run_id  # it continued as new
    assert payments.count() == turns - 1 and paid(payments, "big") == 0
    last = step(result.ledger, f"t{turns}.tool.1.pay")
    assert last.status == "rejected" and (last.decided_by or "").startswith("policy: rule 1")
    assert (step(result.ledger, f"t{turns - 1}.tool.2.pay").decided_by or "").startswith(
        "remembered: grace"
    )
    assert (step(result.ledger, "t1.policy.1").decided_by or "") == "lin"
    assert any(i.signal == "set_policy" and "malformed" in i.reason for i in status_ignored)
