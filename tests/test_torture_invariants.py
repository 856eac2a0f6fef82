"""The torture test's spend and approval invariants judge evidence as they say, each able to fail.

Histories are stood in for by `evidence.Execution` records (what `evidence.read` makes of a
real one); `bench/torture_mutants.py` shows each invariant failing on real runs.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from waypoint._torture import billing, invariants
from waypoint._torture.approvals import approval_gate, approval_receipt
from waypoint._torture.billing import Total
from waypoint._torture.evidence import Cancelled, Decision, Execution, ToolStep
from waypoint.protocol import (
    AgentState,
    ForkSource,
    Limits,
    ModelResponse,
    PartialSpend,
    RunInput,
    RunResult,
    StepRecord,
    Usage,
)
from waypoint.protocol.policy import ApprovalPolicy, Rule

PROMPT = Usage(input_tokens=900)
TASK = RunInput(agent="a", task="t")


def answer(output: int) -> ModelResponse:
    return ModelResponse(
        model="m",
        content=[],
        stop_reason="end_turn",
        usage=Usage(input_tokens=100, output_tokens=output),
    )


def cut_run() -> Execution:
    """A run with one answer (100+50) and a call a cancel cut after its prompt (900 in, 1 out)."""
    ex = Execution("run", "r1", "r1", answers=[answer(50)])
    ex.cancelled.append(
        Cancelled("t2.model", PartialSpend(usage=PROMPT.model_copy(update={"output_tokens": 1})))
    )
    return ex


def test_a_cut_calls_reported_spend_must_be_in_the_ledger() -> None:
    ex = cut_run()
    served = [Usage(input_tokens=100, output_tokens=50), Usage(input_tokens=900, output_tokens=40)]
    bill = billing.match(served, [ex])
    assert bill.reported == 901 and bill.unreported == 39 and not bill.unmatched
    assert billing.billing(150 + 901, bill, {}) == []
    dropped = billing.billing(150, bill, {})  # the cut call's spend left out
    assert dropped and dropped[0].startswith("billing:")
    # An unknowable attempt excuses one whole answer, never a reported one.
    assert billing.billing(150 + 901 - 150, bill, {"retried": 1}) == []
    assert billing.billing(150, bill, {"retried": 1})
    totals = {"run": Total(150, 0.0, final=True)}
    found = billing.cancelled_spend(["run"], totals, {}, [ex], bill)
    assert found and "cancelled calls reported 901" in found[0]
    totals = {"run": Total(1051, 0.0, final=True)}
    assert billing.cancelled_spend(["run"], totals, {}, [ex], bill) == []


def test_a_retry_reports_its_freed_attempts_call_with_its_own() -> None:
    """Killed, freed and retried, then cut by a steer: the retry reports both calls' spend
    (soak seed 91456: 1,264 in, 2 out, for two answers of 632 in); the judge finds both."""
    ex = Execution("run", "r1", "r1")
    both = Usage(input_tokens=1264, output_tokens=2)
    ex.cancelled.append(Cancelled("t1.model", PartialSpend(usage=both)))
    served = [Usage(input_tokens=632, output_tokens=95)] * 2 + [Usage(input_tokens=9)]
    bill = billing.match(served, [ex])
    assert not bill.unmatched and bill.reported == 1266 and bill.pool == [9]
    assert bill.unreported == 2 * 727 - 1266
    thrice = Usage(input_tokens=1896, output_tokens=2)  # three calls' worth: not two answers
    ex.cancelled[0] = Cancelled("t1.model", PartialSpend(usage=thrice))
    assert billing.match(served, [ex]).unmatched


def test_a_reported_spend_no_answer_was_is_a_violation() -> None:
    bill = billing.match([Usage(input_tokens=100, output_tokens=50)], [cut_run()])
    assert bill.unmatched
    totals = {"run": Total(1051, 0.0, final=True)}
    assert billing.cancelled_spend(["run"], totals, {}, [cut_run()], bill)


def test_the_budget_holds_for_a_cancelled_run_against_the_largest_limit_in_force() -> None:
    ex = Execution("run", "r1", "r1", limits=[Limits(max_cost_usd=0.02), Limits(max_cost_usd=0.09)])
    assert billing.budget(["run"], {"run": Total(10, 0.08, final=False)}, [ex]) == []
    found = billing.budget(["run"], {"run": Total(10, 0.1, final=False)}, [ex])
    assert found and found[0].startswith("budget: run spent $0.1000")
    capped = Execution("run", "r1", "r1", limits=[Limits(max_total_tokens=100)])
    assert billing.budget(["run"], {"run": Total(101, 0.0, final=True)}, [capped])


def transfer(event_id: int, completed: bool = True) -> ToolStep:
    return ToolStep(event_id, "t1.tool.1.transfer", "transfer", {"ref": "r1"}, completed)


def approve(event_id: int, signature: str = "") -> Decision:
    payload: dict = {"step_id": "t1.tool.1.transfer", "reviewer": "ann"}
    if signature:
        payload["signature"] = {"signed_at": "2026-01-01T00:00:00+00:00", "value": signature}
    return Decision(event_id, "approve", payload)


def test_an_effect_that_always_asks_needs_an_approve_of_its_own_run_before_it_runs() -> None:
    approved = Execution("run", "r1", "r1", decisions=[approve(5)], tools=[transfer(7)])
    assert approval_gate([approved]) == []
    late = Execution("run", "r1", "r1", decisions=[approve(9)], tools=[transfer(7)])
    assert approval_gate([late])
    never_ran = Execution("run", "r1", "r1", tools=[transfer(7, completed=False)])
    assert approval_gate([never_ran]) == []


def test_a_signed_approve_copied_from_an_earlier_run_counts_for_nothing() -> None:
    first = Execution(
        "run", "r1", "r1", start=1, decisions=[approve(5, "sig")], tools=[transfer(7)]
    )
    rerun = Execution(
        "run", "r2", "r2", start=2, decisions=[approve(5, "sig")], tools=[transfer(7)]
    )
    found = approval_gate([first, rerun])
    assert len(found) == 1 and "run t1.tool.1.transfer" in found[0]


def said(runs: bool, step: str = "t1.tool.1.transfer", **ex: Any) -> list[str]:
    """What `approval_receipt` finds of one approve receipt in a one-history chain."""
    receipt = {"step_id": step, "decision": "approved", "runs": runs}
    return approval_receipt([Execution("run", "r1", "r1", receipts=[receipt], **ex)])


def test_an_approve_receipt_says_whether_its_call_then_started_in_its_own_chain() -> None:
    assert said(True, tools=[transfer(7)]) == [] and said(False) == []
    assert "said not run" in said(False, tools=[transfer(7)])[0]
    assert "never started" in said(True)[0]
    assert said(True, ended_cancelled=True) == []  # held by a pause, then cancelled
    errand = "t1.tool.1.errand"
    assert said(False, errand, children=[f"run--{errand}"])  # its sub-agent started
    assert said(True, errand, children=[f"run--{errand}"]) == []
    assert said(True, "t1.tool.1.ask") == []  # a client answers it: nothing a history shows


def test_a_fork_keeps_the_policy_its_ledger_names() -> None:
    ask_pay = ApprovalPolicy(rules=[Rule(action="ask", tool="pay")])
    source = Execution(
        "run",
        "r1",
        "r1",
        decisions=[Decision(2, "set_policy", {"policy": ask_pay.model_dump(mode="json")})],
    )
    line = StepRecord(step_id="t1.policy.1", kind="operator", input_hash=ask_pay.digest())
    pay = ToolStep(4, "t3.tool.1.pay", "pay", {"ref": "r3"}, completed=True)
    fork = Execution(
        "fork", "f1", "f1", tools=[pay], fork_state=AgentState(input=TASK, ledger=[line])
    )
    found = approval_gate([source, fork])
    assert len(found) == 1 and found[0].startswith("approval_gate: fork t3.tool.1.pay")
    no_line = Execution("fork", "f1", "f1", tools=[pay], fork_state=AgentState(input=TASK))
    assert approval_gate([source, no_line]) == []


def test_a_fork_must_carry_what_its_source_spent_up_to_the_fork_point() -> None:
    lines = [
        StepRecord(step_id="t1.model", kind="model", input_hash="x", tokens=100),
        StepRecord(step_id="t2.model", kind="model", input_hash="x", tokens=200),
    ]
    result = RunResult(
        agent="a",
        output="",
        stop_reason="end_turn",
        turns=3,
        total_tokens=600,
        cost_usd=0.0,
        cost_known=True,
        ledger=[*lines, StepRecord(step_id="t3.model", kind="model", input_hash="x", tokens=300)],
    )
    given = RunInput(agent="a", task="t", fork=ForkSource(workflow_id="run", after_turn=2))
    totals = {"run": Total(600, 0.0, True), "fork": Total(450, 0.0, True)}
    carried = Execution(
        "fork",
        "f1",
        "f1",
        input=given,
        answers=[answer(50)],
        fork_state=AgentState(input=TASK, ledger=lines, total_tokens=300),
    )
    assert billing.fork_billing(["run", "fork"], totals, {"run": result}, [carried]) == []
    dropped = replace(carried, fork_state=AgentState(input=TASK, ledger=lines, total_tokens=0))
    found = billing.fork_billing(["run", "fork"], totals, {"run": result}, [dropped])
    assert found and "carried 0 tokens" in found[0]


def test_the_budget_in_force_while_a_call_ran_binds_it_though_a_later_raise_is_larger() -> None:
    from waypoint._torture.evidence import Spent

    crossed = Spent("t2.model", 5000, 0.004, cap=Limits(max_cost_usd=0.003))
    ex = Execution(
        "run", "r1", "r1", limits=[Limits(max_cost_usd=0.003), Limits(max_cost_usd=0.056)]
    )
    ex.spent.append(crossed)
    found = billing.budget(["run"], {"run": Total(5000, 0.004, final=True)}, [ex])
    assert found == [
        "budget: run had spent $0.0040 after t2.model, past max_cost_usd=0.003 in force then"
    ]
    ex.spent[0] = Spent("t2.model", 5000, 0.004, cap=Limits(max_cost_usd=0.056))
    assert billing.budget(["run"], {"run": Total(5000, 0.004, final=True)}, [ex]) == []


def test_with_a_rerun_a_ref_only_one_chain_wrote_is_not_judged_told_failed() -> None:
    """Seed 6181: the first run's pay never ran (and said so), its rerun's did."""
    from waypoint._torture.invariants import _in_every_chain

    first, rerun = "torture-6181/01a2-086e", "torture-6181/01a2-b0eb"
    rows = [
        (f"{first}/t3.tool.1.ship", "r4"),
        (f"{rerun}/t3.tool.1.ship", "r4"),
        (f"{rerun}/t3.tool.3.pay", "r6"),
    ]
    assert _in_every_chain(rows) == {"r4"}
    # Seed 90069: the first chain wrote nothing at all (its transfer was refused on a changed
    # read); only the rerun's chain wrote r2, so the rerun is what says it was rerun.
    only_rerun = [(f"{rerun}/t1.tool.2.transfer", "r2")]
    assert _in_every_chain(only_rerun, ["torture-6181"], ["torture-6181"]) == set()
    assert _in_every_chain(rows, ["torture-6181"], ["torture-6181"]) == {"r4"}


def test_a_fork_of_a_first_chain_with_no_result_is_not_judged_by_its_rerun() -> None:
    """Seed 6279: the first chain was cancelled (no result); its rerun's ledger, whose turn 2
    held no steer, stood in for it, and the fork's 2,819 carried tokens were 'not' 2,807."""
    later = {"run": "the rerun's", "fork": "the fork's"}
    assert invariants.first_chains(later, {}, ["run"]) == {"fork": "the fork's"}
    assert invariants.first_chains(later, {"run": "first"}, ["run"])["run"] == "first"
    assert invariants.first_chains(later, {}, []) == later
