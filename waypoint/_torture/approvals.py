"""The `approval_gate` invariant: no effect that needed a person's approval ran without one.

Judged from the histories alone (`waypoint._torture.evidence`), step by step in event order:
an effect's `run_tool` activity that completed needed approval when its tool always asks
(`transfer`), or when the policy in force when it was scheduled says `ask` (`deny` means it
must never run). The policy in force is the last `set_policy` the run's chain received, or for
a fork the one its kept ledger's last `policy set` line names (by digest, among the policies
any history received), else the run's own: its start snapshot's (a fork's source's), which no
replan changes (issue 48: a replan adopts tools, nothing else). It passed the gate only if,
before it was scheduled, its own chain received an approve naming that step, or a remembering
approve of that tool: never a decision of another chain. A signed payload whose signature
first reached another chain is a copy (a decision replayed onto a rerun), and counts for
nothing, a `set_policy` included.

The `approval_receipt` invariant: what an approve's receipt says of its call (`runs`) is what
the call then did in that chain (`approval_receipt`).
"""

from __future__ import annotations

from typing import Any

from waypoint._torture.agent import EFFECT_TOOLS
from waypoint._torture.evidence import Decision, Execution, ToolStep, chains
from waypoint._torture.promises import snapshot, source_of
from waypoint._workflows.children import child_id
from waypoint.protocol.policy import ApprovalPolicy

ALWAYS_ASKS = {"transfer"}
"""The torture agent's tools with `requires_approval=True` (`waypoint._torture.agent`)."""
CLIENT_TOOLS = {"ask"}
"""Tools a client answers: an approved call of one starts nothing a history shows."""


def _policy(raw: Any) -> ApprovalPolicy | None:
    try:
        return ApprovalPolicy.model_validate(raw)
    except Exception:  # noqa: BLE001 - a policy the run would refuse set nothing
        return None


def approval_gate(executions: list[Execution]) -> list[str]:
    """Every completed effect that needed approval had a valid decision of its own run."""
    grouped = chains(executions)
    first_seen: dict[str, int] = {}  # signature value -> start of the chain it reached first
    for group in sorted(grouped.values(), key=lambda g: g[0].start):
        for ex in group:
            for d in ex.decisions:
                if d.signature:
                    first_seen.setdefault(d.signature, group[0].start)
    policies: dict[str, ApprovalPolicy] = {}
    for ex in executions:
        for d in ex.decisions:
            if d.name == "set_policy" and (p := _policy(d.payload.get("policy"))) is not None:
                policies[p.digest()] = p
    found: list[str] = []
    for (workflow_id, _), group in grouped.items():

        def copied(d: Decision, start: int = group[0].start) -> bool:
            return bool(d.signature) and first_seen.get(d.signature, start) < start

        located = source_of(workflow_id, grouped)
        spec = snapshot(grouped[located[0]] if located else group)
        policy, known = _at_start(group[0], policies, spec.policy if spec else None)
        approved: set[str] = set()
        remembered: set[str] = set()
        for ex in group:
            events: list[Decision | ToolStep] = [*ex.decisions, *ex.tools]
            for item in sorted(events, key=lambda e: e.event_id):
                if isinstance(item, Decision):
                    if copied(item):
                        continue
                    if item.name == "set_policy":
                        policy, known = _policy(item.payload.get("policy")), True
                    elif item.name == "approve":
                        step = str(item.payload.get("step_id", ""))
                        approved.add(step)
                        if item.payload.get("remember"):
                            remembered.add(step.rsplit(".", 1)[-1])
                    continue
                why = _unguarded(item, policy, known, approved, remembered)
                if why:
                    found.append(f"approval_gate: {workflow_id} {item.step_id} {why}")
    return found


def _at_start(
    first: Execution, policies: dict[str, ApprovalPolicy], own: ApprovalPolicy | None
) -> tuple[Any, bool]:
    """The policy a chain starts with, and whether it is known: a fork's, from its ledger."""
    state = first.fork_state
    if state is None:
        return own, True
    lines = [
        r
        for r in state.ledger
        if r.kind == "operator" and len(r.step_id.split(".")) == 3 and ".policy." in r.step_id
    ]
    if not lines:
        return own, True
    found = policies.get(lines[-1].input_hash)
    return found, found is not None


def _unguarded(
    step: ToolStep,
    policy: ApprovalPolicy | None,
    known: bool,
    approved: set[str],
    remembered: set[str],
) -> str:
    """Why this completed effect passed a gate it should not have; '' when it did not."""
    if not step.completed or step.tool not in EFFECT_TOOLS:
        return ""
    verdict = policy.judge(step.tool, "effect", step.arguments) if policy else None
    if verdict is not None and verdict.action == "deny":
        return f"ran {step.tool} though the policy in force denies it"
    asks = step.tool in ALWAYS_ASKS or (verdict is not None and verdict.action == "ask")
    if not known and step.tool not in ALWAYS_ASKS:
        return ""  # a fork's policy no history shows: nothing to judge it by
    if asks and step.step_id not in approved and step.tool not in remembered:
        rule = "always asks" if step.tool in ALWAYS_ASKS else "is asked for by the policy"
        return (
            f"ran {step.tool}, which {rule}, with no approve of that step in its own run "
            "before it was scheduled"
        )
    return ""


def approval_receipt(executions: list[Execution]) -> list[str]:
    """Each approve receipt's `runs` is what its call then did in the receipt's own chain.

    `false` (refused after all, or cancelled first): the call never started there, no
    `run_tool` scheduled and no sub-agent started. `true`: it started there, unless the chain
    ended cancelled (a call held by a pause, or one the cancel reached first); a
    client-answered call starts nothing to see. None (not run yet, or nothing run on the
    decision's word) claims nothing.
    """
    found: list[str] = []
    for (workflow_id, _), group in chains(executions).items():
        started = {t.step_id for ex in group for t in ex.tools}
        children = {c for ex in group for c in ex.children}
        excused = group[-1].ended_cancelled
        for receipt in (r for ex in group for r in ex.receipts):
            step, runs = str(receipt.get("step_id", "")), receipt.get("runs")
            ran = step in started or child_id(workflow_id, step) in children
            if runs is False and ran:
                said = receipt.get("detail", "")
                found.append(f"approval_receipt: {workflow_id} {step} said not run ({said}); ran")
            seen = not excused and step.rsplit(".", 1)[-1] not in CLIENT_TOOLS
            if runs is True and not ran and seen:
                found.append(f"approval_receipt: {workflow_id} {step} said it runs; never started")
    return found
