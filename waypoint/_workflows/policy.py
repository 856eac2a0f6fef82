"""A run's approval policy: what it decides for a call, changes to it, remembered approvals.

Pure functions over `AgentState`, called from the tool funnel and from update/signal handlers;
deterministic. Each change and each remembered approval is a ledger line naming who made it.
"""

from __future__ import annotations

from typing import Any, Literal

from temporalio import workflow

from waypoint._workflows import decisions
from waypoint._workflows.gates import Gates

with workflow.unsafe.imports_passed_through():
    from waypoint.protocol import (
        AgentState,
        ApprovalDecision,
        Receipt,
        StepRecord,
        ToolPreparation,
        ToolSpec,
    )
    from waypoint.protocol.hashing import keyed_sha256_hex
    from waypoint.protocol.policy import (
        ApprovalPolicy,
        PolicyChange,
        PolicySet,
        PolicyState,
        PolicyView,
        Remembered,
        Verdict,
        verdict_for,
    )
    from waypoint.protocol.verbs import SET_POLICY


KEEP_POLICIES = 16
"""Policies a run keeps with their ledger lines, for forks after an earlier change."""


def current(s: AgentState) -> ApprovalPolicy | None:
    """The policy in force: the last one set on the run, else the spec's."""
    if s.policy.changes:
        return s.policy.policy
    return s.spec.policy if s.spec is not None else None


def view(s: AgentState) -> PolicyView:
    """The policy in force and where it came from, for the `policy` query."""
    policy = current(s)
    return PolicyView(
        policy=policy,
        source="changed" if s.policy.changes else "spec",
        changes=s.policy.changes,
        digest=policy.digest() if policy is not None else "",
        remembered=s.policy.remembered,
        forgotten=s.policy.forgotten,
    )


def verdict(s: AgentState, tool: ToolSpec, arguments: dict[str, Any]) -> Verdict | None:
    """What the policy (and remembered approvals) decide for this call; None: the tool decides.

    A tool with a predicate counts as asking here: whether it would is known only on the worker,
    so a remembered approval covers it too.
    """
    return verdict_for(
        current(s),
        s.policy.remembered,
        tool.name,
        tool.kind,
        with_defaults(tool, arguments),
        tool_asks=tool.approval != "never",
    )


def with_defaults(tool: ToolSpec, arguments: dict[str, Any]) -> dict[str, Any]:
    """The arguments as the tool will see them: top-level schema defaults filled in.

    Else "ask above 1,000 EUR" would let through a call that leaves the currency to its default.
    """
    properties = tool.input_schema.get("properties", {})
    defaults = {
        k: v["default"] for k, v in properties.items() if isinstance(v, dict) and "default" in v
    }
    return {**defaults, **arguments}


def route(tool: ToolSpec, v: Verdict | None) -> Literal["deny", "ask", "run", "tool"]:
    """`deny`: refuse; `ask`: a person approves; `run`: no approval; `tool`: the tool decides.

    `allow` still asks for a tool that requires approval always, unless a reviewer remembered.
    """
    if v is None:
        return "tool"
    if v.action == "allow" and tool.approval == "always" and not v.remembered:
        return "ask"
    return "run" if v.action == "allow" else v.action


def gated(tool: ToolSpec, prep: ToolPreparation) -> bool:
    """Whether a tool that decides for itself (`route` said `tool`) needs a person.

    The snapshot decides wherever it can: a tool that always asks asks, even if the prepare
    activity said no (a forged completion from a rogue poller on the agent's queue); only a
    predicate's verdict, computed on the worker, is taken from it.
    """
    return tool.approval == "always" or prep.needs_approval


def stamp(s: AgentState, record: StepRecord, v: Verdict) -> None:
    """Record the rule that matched a call on its ledger line; it decided unless it asked."""
    record.rule = v.by
    if v.action != "ask":
        record.decided_by = v.by
        record.decided_at = workflow.now().isoformat()


def change_refusal(change: PolicyChange) -> str:
    """Why a policy change cannot apply, or '' (the payload's model already checked its shape)."""
    if not change.reviewer.strip():
        return "a policy change needs a reviewer"
    return ""


async def apply(s: AgentState, gates: Gates, change: PolicyChange) -> Receipt:
    """Apply a policy change once (by its decision id), or record why it was refused."""
    if s.spec is None:
        # Whether the agent accepts signed changes only is in its spec: judge it by that.
        await workflow.wait_condition(lambda: s.spec is not None)
    why = await gates.admit(SET_POLICY, "", change, lambda: change_refusal(change))
    if why is not None:
        return decisions.receipt(s, s.decision_ids.get(change.decision_id, ""), "policy set", why)
    receipt = set_policy(s, change, change.signature is not None and gates.signed_only())
    gates.applied(change.decision_id, receipt.step_id)
    return receipt


def set_policy(s: AgentState, change: PolicyChange, signed: bool = False) -> Receipt:
    """Put a new policy in force for the rest of the run, with a ledger line saying who did."""
    s.policy.policy = change.policy
    s.policy.changes += 1
    by = decisions.who(change.reviewer, change.identity, signed)
    step_id = f"t{s.turn}.policy.{s.policy.changes}"
    rules = len(change.policy.rules)
    why = f": {change.reason}" if change.reason else ""
    record = StepRecord(
        step_id=step_id,
        kind="operator",
        input_hash=change.policy.digest(),
        status="completed",
        summary=(
            f"policy set ({rules} rules, default {change.policy.default or 'tool'}, "
            f"sha256 {change.policy.digest()[:12]}){why}"
        )[:160],
    )
    s.ledger.append(record)
    kept = [*s.policy.kept, PolicySet(step_id=step_id, policy=change.policy)]
    s.policy.kept = kept[-KEEP_POLICIES:]
    decisions.stamp(s, step_id, by)
    return decisions.receipt(s, step_id, "policy set")


def _set_by(r: StepRecord) -> bool:
    """Whether this ledger line is a policy change (`t3.policy.2`)."""
    parts = r.step_id.split(".")
    return r.kind == "operator" and len(parts) == 3 and parts[1] == "policy"


def at_fork(s: AgentState, ledger: list[StepRecord]) -> PolicyState:
    """The policy a fork keeping `ledger` applies: the one its last `policy set` line set.

    None set there: the spec's. Remembered approvals are not carried: a reviewer gave them
    for the run they watched, and a fork, which goes its own way, asks again.

    Raises:
        ValueError: That policy is older than the `KEEP_POLICIES` the run keeps.
    """
    lines = [r for r in ledger if _set_by(r)]
    if not lines:
        return PolicyState()
    last, carried = lines[-1].step_id, {r.step_id for r in lines}
    kept = [p for p in s.policy.kept if p.step_id in carried]
    found = next((p.policy for p in kept if p.step_id == last), None)
    if found is None and len(lines) == s.policy.changes:
        found = s.policy.policy  # the policy in force now, kept whatever the bound
    if found is None:
        raise ValueError(
            f"the policy {last} set is no longer kept (a run keeps its last {KEEP_POLICIES}); "
            "fork after a later turn"
        )
    return PolicyState(policy=found, changes=len(lines), kept=kept)


def describe(s: AgentState) -> str:
    """The policy in force, in one line for `status`: where it came from, its digest."""
    policy = current(s)
    if s.policy.changes:
        by = s.policy.kept[-1].step_id if s.policy.kept else f"change {s.policy.changes}"
        where = f"set by {by}"
    else:
        where = "the spec's"
    if policy is None:
        shown = f"{where}: none (each tool's requires_approval decides)"
    else:
        rules = len(policy.rules)
        default = policy.default or "tool decides"
        shown = (
            f"{where} ({rules} rule{'s' * (rules != 1)}, default {default}, "
            f"sha256 {policy.digest()[:12]})"
        )
    remembered = len(s.policy.remembered)
    if remembered:
        shown += f", {remembered} remembered approval{'s' * (remembered != 1)}"
    return shown


def remember(
    s: AgentState,
    record: StepRecord,
    spec: ToolSpec,
    arguments: dict[str, Any],
    decision: ApprovalDecision,
) -> None:
    """Keep an approval for the rest of the run when the reviewer asked to (`--remember`)."""
    if not decision.remember:
        return
    tool = spec.name
    scoped = with_defaults(spec, arguments) if decision.remember == "args" else None
    by = f"{decisions.who(decision.reviewer, decision.identity)} on {record.step_id}"
    forgot = _keep(s, Remembered(tool=tool, arguments=scoped, by=by))
    scope = "these arguments" if scoped is not None else "every call"
    step_id = f"{record.step_id}.remember"
    salt = s.spec.hash_salt if s.spec is not None else ""
    s.ledger.append(
        StepRecord(
            step_id=step_id,
            kind="operator",
            tool=tool,
            input_hash=keyed_sha256_hex(salt, {"tool": tool, "arguments": scoped}),
            status="completed",
            summary=f"remembered approval of {tool} for {scope} for the rest of the run{forgot}",
        )
    )
    decisions.stamp(s, step_id, by)


def _keep(s: AgentState, memory: Remembered) -> str:
    """Add a remembered approval, keeping the latest `keep_remembered`; says what was forgotten.

    The same scope remembered again replaces the older entry instead of taking a second place.
    """
    keep = s.history_budget().keep_remembered
    others = [
        m for m in s.policy.remembered if (m.tool, m.arguments) != (memory.tool, memory.arguments)
    ]
    over = max(0, len(others) + 1 - keep)
    bounded = over > 0 or len(others) < len(s.policy.remembered)
    if not bounded:
        s.policy.remembered.append(memory)
        return ""
    forgotten, s.policy.remembered = others[:over], [*others[over:], memory]
    s.policy.forgotten += len(forgotten)
    if not forgotten:
        return ""
    names = ", ".join(sorted({m.tool for m in forgotten}))
    return f" (forgot the oldest {len(forgotten)}, of {names}: a run keeps {keep})"
