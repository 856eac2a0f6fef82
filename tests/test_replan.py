"""A replan adopts the new build's tools and nothing else: the run keeps its prompt and policy."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Literal

import pytest
from pydantic import BaseModel
from temporalio.client import Client
from temporalio.exceptions import ApplicationError

from tests.agents import PAY_SCRIPT, Payments, build_agent, with_changed_pay, with_tools
from tests.conftest import (
    running_worker,
    the_pending_approval,
    wait_for_state,
    wait_for_visibility,
)
from tests.test_changes import refund
from waypoint._activities.spec import SpecActivities
from waypoint._operations.deploy_check import check_deploy
from waypoint._workflows.replan import adopt, adopted, forget_remembered
from waypoint.client import decisions, runs
from waypoint.client.runs import resume
from waypoint.protocol import AgentSpec, AgentState, LoadSpecInput, RunInput, StepOptions, ToolSpec
from waypoint.protocol.output import FINAL_TOOL, final_tool
from waypoint.protocol.policy import ApprovalPolicy, Condition, PolicyState, Remembered, Rule
from waypoint.testing import Script, reply, text, tool_use

FAST = StepOptions(
    retry_initial_interval=timedelta(milliseconds=50),
    retry_max_interval=timedelta(milliseconds=100),
)
ASK_ABOVE_500 = ApprovalPolicy(
    rules=[Rule(action="ask", tool="pay", when=[Condition(field="amount", op="gt", value=500)])]
)
CHARGE_742: Script = [
    reply(tool_use("pay", payee="acme", amount=742)),
    reply(tool_use("pay", payee="acme", amount=742, currency="EUR")),
    reply(text("Paid acme 742.")),
]


@pytest.mark.parametrize("on_change", ["refuse", "replan"])
async def test_a_replan_adopts_the_new_tools_and_keeps_the_runs_prompt_and_policy(
    client: Client, task_queue: str, tmp_path: Path, on_change: Literal["refuse", "replan"]
) -> None:
    """The new build says "default allow" and a new prompt; the run asked above EUR 500.

    `refuse` parks the changed step and `resume --replan` replans; `replan` replans at once.
    """
    payments = Payments(tmp_path / "p.db")
    old = build_agent(payments, CHARGE_742)
    old.system, old.policy, old.on_change = "prompt v1", ASK_ABOVE_500, on_change
    async with running_worker(client, [old], task_queue):
        handle = await runs.start_run(client, "payer", "pay", task_queue=task_queue, options=FAST)
        asked = await wait_for_state(client, handle.id, "awaiting_approval")
        policy = await decisions.show_policy(client, handle.id)
    new = with_tools(build_agent(payments, CHARGE_742), refund)
    new = with_changed_pay(new, payments, "replan" if on_change == "refuse" else "refuse")
    new.system, new.model = "prompt v2", "claude-opus-4-1"
    new.policy = ApprovalPolicy(default="allow")
    async with running_worker(client, [new], task_queue) as model:
        await runs.approve(client, handle.id, "t1.tool.1.pay", reviewer="me")
        if on_change == "refuse":
            await wait_for_state(client, handle.id, "tool_changed")
            await resume(client, handle.id, reviewer="ops", replan=True)
        pending = await the_pending_approval(client, handle.id)  # the run's rule still asks
        assert (pending.step_id, pending.rule) == ("t2.tool.1.pay", asked.pending_approvals[0].rule)
        assert pending.rule and "> 500" in pending.rule and payments.count() == 0
        status = await runs.status(client, handle.id)
        after = await decisions.show_policy(client, handle.id)
        await resume(client, handle.id, reviewer="ops", max_turns=30)  # limits: their own verb
        await runs.approve(client, handle.id, "t2.tool.1.pay", reviewer="me")
        result = await handle.result()
    (request, *_) = [r for r in model.requests if r.step_id == "t2.model"]
    assert (request.system, request.model) == ("prompt v1", "claude-sonnet-4-6")
    tools = {t.name: t for t in request.tools}
    assert "currency" in tools["pay"].input_schema["properties"] and "refund" in tools
    assert (status.plan_version, status.policy) == (2, asked.policy)
    assert after.digest == policy.digest == ASK_ABOVE_500.digest() and after.source == "spec"
    lines = {r.step_id: r for r in result.ledger}
    replanned = lines["t1.replan.2"].summary
    assert replanned.startswith("plan v2, tools only: changed pay; added refund; after tool 'pay'")
    assert (lines["t2.limits.1"].kind, lines["t2.limits.1"].summary) == (
        "operator",
        "limits set: max_turns 20 -> 30",
    )
    assert (result.state, payments.count()) == ("done", 1)
    # `deploy check` compares the spec the run holds (its own, with the adopted tools).
    scope = f"WorkflowId = '{handle.id}' AND ExecutionStatus = 'Completed'"
    await wait_for_visibility(client, scope, 1)
    (check,) = (await check_deploy(client, [new], query=scope)).runs
    assert check.change == "continue" and not any(d.startswith("tool") for d in check.differences)
    for kept in ("prompt", "model", "policy"):
        assert f"{kept} changed (the run keeps the one it started with)" in check.differences


class Answer(BaseModel):
    total: int


def spec(*tools: ToolSpec, output: type[BaseModel] | None = None, **fields: object) -> AgentSpec:
    final = [final_tool(output)] if output else []
    return AgentSpec(
        name="a",
        model="m",
        provider="scripted",
        system="s",
        tools=[*tools, *final],
        output_schema=final[0].input_schema if final else None,
    ).model_copy(update=fields)


def tool(name: str, description: str = "d", approval: str = "never") -> ToolSpec:
    return ToolSpec.model_validate(
        {
            "name": name,
            "description": description,
            "input_schema": {},
            "kind": "effect",
            "schema_hash": name + description,
            "approval": approval,
        }
    )


def test_a_replan_keeps_the_runs_final_answer_and_takes_no_other_field() -> None:
    run = spec(tool("add"), tool("pay"), output=Answer, system="mine", plan_version=1)
    build = spec(tool("pay", "new"), tool("refund"), system="theirs", policy=ASK_ABOVE_500)
    replanned = adopt(run, build, 2)
    assert [t.name for t in replanned.tools] == ["pay", "refund", FINAL_TOOL]
    assert replanned.tools[-1] == run.tools[-1] and replanned.output_schema == run.output_schema
    assert replanned == run.model_copy(update={"tools": replanned.tools, "plan_version": 2})
    assert adopted(run, replanned) == "changed pay; added refund; removed add"
    # The build's own `final_answer` is its output type, not a tool the run adopts.
    assert [t.name for t in adopt(spec(tool("a")), spec(output=Answer), 2).tools] == []


def test_a_replan_of_many_tools_counts_them_within_its_ledger_line() -> None:
    many = spec(*(tool(f"crm_tool_number_{i}") for i in range(12)))
    assert adopted(spec(), many) == "12 added"
    assert adopted(many, many) == "no tool differs"


def test_a_replan_never_loosens_a_tools_own_approval() -> None:
    """A build that dropped `requires_approval=True` from `pay`: the run's `pay` still asks."""
    run = spec(tool("pay", approval="always"), tool("add"))
    build = spec(tool("pay", "new"), tool("add", approval="predicate"))
    replanned = {t.name: t for t in adopt(run, build, 2).tools}
    assert (replanned["pay"].approval, replanned["add"].approval) == ("always", "predicate")
    assert replanned["pay"].description == "new"


def test_a_replan_forgets_approvals_remembered_for_the_tools_it_changed() -> None:
    """`pay` was remembered as approved; the build changed `pay`: the new `pay` asks again."""
    run = spec(tool("pay"), tool("add"), tool("ship"))
    state = AgentState(
        input=RunInput(agent="a", task="t"),
        spec=adopt(run, spec(tool("pay", "new"), tool("add")), 2),
        policy=PolicyState(
            remembered=[
                Remembered(tool="pay", by="ann on t1.tool.1.pay"),
                Remembered(tool="add", by="ann on t1.tool.2.add"),
                Remembered(tool="ship", by="ann on t1.tool.3.ship"),
            ]
        ),
    )
    said = forget_remembered(state, run)
    assert [r.tool for r in state.policy.remembered] == ["add"]
    assert said == "; forgot approvals remembered for pay, ship"
    assert forget_remembered(state, state.spec) == ""  # nothing changed: nothing forgotten


async def test_a_replan_loads_the_builds_tools_without_judging_the_builds_model(
    tmp_path: Path,
) -> None:
    """The new build names a model the API does not know: a start parks, a replan (which keeps
    the run's model) does not."""
    build = build_agent(Payments(tmp_path / "p.db"), PAY_SCRIPT)
    build.model = "claude-nope-9"

    async def unknown(model: str) -> str:
        return f"model {model!r} is not known to the API"

    specs = SpecActivities({"payer": build}, use_anthropic=True, check_model=unknown)
    with pytest.raises(ApplicationError, match="claude-nope-9") as refused:
        await specs.load_spec(LoadSpecInput(agent="payer"))
    assert refused.value.type == "UnknownModel"
    replan = await specs.load_spec(LoadSpecInput(agent="payer", provider="anthropic"))
    assert [t.name for t in replan.tools] == ["add", "weather", "pay"]
