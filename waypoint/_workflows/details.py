"""The markdown a run shows as its current details in the Temporal Web UI."""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from waypoint.protocol import AgentState

from waypoint._workflows import freshness


def render_details(s: AgentState, workflow_id: str, last_steps: int = 5) -> str:
    """Status, what the run waits for (with the command that unblocks it), recent steps, cost."""
    cost = f"${s.cost_usd:.4f}" + ("" if s.cost_known else " (some steps unpriced)")
    lines = [
        f"**{s.input.agent}**: `{s.state}`" + (f" ({s.detail})" if s.detail else ""),
        f"turn {s.turn} · {s.total_tokens:,} tokens · {cost}",
    ]
    if s.pending:
        lines += ["", "**Awaiting approval**"]
        for p in s.pending.values():
            lines.append(f"- `{p.step_id}` {p.tool}: `waypoint approve {workflow_id} {p.step_id}`")
    if s.questions:
        lines += ["", "**Awaiting an answer**"]
        for q in s.questions.values():
            lines.append(
                f"- `{q.step_id}` {q.tool}: `waypoint answer {workflow_id} {q.step_id} --json ...`"
            )
    if s.unresolved:
        lines += ["", "**Needs reconciliation**"]
        for u in s.unresolved.values():
            lines.append(
                f"- `{u.step_id}` {u.tool}: {u.reason[:120]} "
                f"`waypoint resolve {workflow_id} {u.step_id} --result JSON|--retry|--abort`"
            )
    fresh = freshness.at_a_glance(s, last=120)
    if fresh is not None:
        lines += ["", f"**Fresh reads** {fresh.counts()}"]
        if fresh.last:
            lines.append(f"- last: {fresh.last}")
    if s.ledger:
        lines += ["", "**Last steps**"]
        for r in s.ledger[-last_steps:]:
            lines.append(f"- `{r.step_id}` {r.status} {r.summary[:80]}")
    return "\n".join(lines)
