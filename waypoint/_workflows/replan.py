"""What a replan adopts from the worker's current build: its tools, nothing else. Deterministic.

A replan (`on_change="replan"`, `waypoint resume --replan`) exists so a run can go on after a
tool it needs changed or vanished. It takes the build's tool definitions; the run's prompt,
model, limits, approval policy, settings, `signed_decisions`, output type, Claude's server tools
(they go with the run's model and its price) and the rest stay its own, changed only by their
own verbs (`policy set`, `resume` with limits), each a ledger line.
The `final_answer` tool is not one of the build's tools: it is the run's output type, kept.
A tool's own approval only tightens: one the run asked for always still asks (a predicate is
the worker's code, asked live, replan or not).
"""

from __future__ import annotations

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from waypoint.protocol import AgentSpec, AgentState, ToolOverride, ToolSpec
    from waypoint.protocol.output import FINAL_TOOL
    from waypoint.protocol.tool_options import applied, refusal


def _own(spec: AgentSpec, tool: ToolSpec) -> bool:
    """Whether `tool` is the agent's own, not the `final_answer` its output type makes."""
    return not (spec.output_schema is not None and tool.name == FINAL_TOOL)


STRICTNESS = {"never": 0, "predicate": 1, "always": 2}


def _stricter(had: ToolSpec | None, tool: ToolSpec) -> ToolSpec:
    """The build's tool, asking as strictly as the run's tool of that name did."""
    if had is None or STRICTNESS[had.approval] <= STRICTNESS[tool.approval]:
        return tool
    return tool.model_copy(update={"approval": had.approval})


def adopt(run: AgentSpec, build: AgentSpec, plan_version: int) -> AgentSpec:
    """The run's spec with the build's tools (the run's `final_answer` kept) at `plan_version`."""
    final = [t for t in run.tools if not _own(run, t)]
    had = {t.name: t for t in run.tools if _own(run, t)}
    tools = [
        _stricter(had.get(t.name), t)
        for t in build.tools
        if _own(build, t) and (not final or t.name != FINAL_TOOL)
    ]
    tools = _with_own_options(tools, run.tool_options)
    return run.model_copy(update={"tools": tools + final, "plan_version": plan_version})


def _with_own_options(tools: list[ToolSpec], options: dict[str, ToolOverride]) -> list[ToolSpec]:
    """The run's own tool options over a new build's tools, each where it still fits."""
    fits = {name: o for name, o in options.items() if not refusal(tools, {name: o})}
    return applied(tools, fits)


def with_run_options(s: AgentState, spec: AgentSpec) -> AgentSpec:
    """The snapshot with the run's own tool options over its tools, recorded in it.

    The spec's ledger line (`t0.spec`) names the tools they are for.

    Raises:
        ApplicationError: They name a tool the agent lacks, or set what it cannot take: the
            run fails at its start, before any step, saying which.
    """
    options = s.input.tool_options
    if not options:
        return spec
    if why := refusal(spec.tools, options):
        raise ApplicationError(
            f"the run's tool options do not fit agent {spec.name!r}: {why}",
            type="ToolOptionsRefused",
            non_retryable=True,
        )
    record = next(r for r in reversed(s.ledger) if r.step_id == "t0.spec")
    record.summary = f"{record.summary}; the run's tool options: {', '.join(options)}"[:160]
    return spec.model_copy(
        update={"tools": applied(spec.tools, options), "tool_options": dict(options)}
    )


def differences(before: AgentSpec, after: AgentSpec) -> dict[str, list[str]]:
    """The tools a replan changed, added and removed, by name."""
    old = {t.name: t for t in before.tools if _own(before, t)}
    new = {t.name: t for t in after.tools if _own(after, t)}
    return {
        "changed": sorted(n for n in old.keys() & new.keys() if old[n] != new[n]),
        "added": sorted(new.keys() - old.keys()),
        "removed": sorted(old.keys() - new.keys()),
    }


def adopted(before: AgentSpec, after: AgentSpec) -> str:
    """The tools a replan added, removed or changed, by name: `changed pay; added refund`."""
    parts = differences(before, after)
    named = "; ".join(f"{k} {', '.join(v)}" for k, v in parts.items() if v)
    if len(named) > 100:  # too many names for a 160-character ledger line: count them
        named = ", ".join(f"{len(v)} {k}" for k, v in parts.items() if v)
    return named or "no tool differs"


def forget_remembered(s: AgentState, before: AgentSpec) -> str:
    """Forget approvals remembered for a tool the replan changed or removed; says which.

    A person approved the tool as it was, not the new build's: its calls ask again.
    """
    assert s.spec is not None
    diff = differences(before, s.spec)
    gone = set(diff["changed"]) | set(diff["removed"])
    kept = [r for r in s.policy.remembered if r.tool not in gone]
    if len(kept) == len(s.policy.remembered):
        return ""
    forgot = sorted({r.tool for r in s.policy.remembered} - {r.tool for r in kept})
    s.policy = s.policy.model_copy(update={"remembered": kept})
    return f"; forgot approvals remembered for {', '.join(forgot)}"
