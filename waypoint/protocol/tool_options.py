"""Per-tool options set over a tool's own (`ToolOverride`): checked, then applied to a spec.

Pure, so workflow code applies a run's own at its start and again after a replan, and
`Agent.spec` applies a worker's; both the same way, both checked as the tool's own would be.
"""

from __future__ import annotations

from collections.abc import Mapping

from waypoint.protocol.spec import ToolOverride, ToolSpec


def refusal(tools: list[ToolSpec], options: Mapping[str, ToolOverride]) -> str:
    """Why `options` cannot apply to `tools`, one reason a line; '' when they can."""
    by_name = {t.name: t for t in tools}
    problems = []
    for name, o in options.items():
        tool = by_name.get(name)
        if tool is None:
            known = ", ".join(sorted(by_name)) or "none"
            problems.append(f"tool options for {name!r}: the agent has no such tool ({known})")
            continue
        if o.fresh_for is not None and (tool.kind != "read" or tool.approval != "never"):
            problems.append(
                f"tool options for {name!r}: fresh_for is for a `read` tool that asks no one "
                f"(it is {tool.kind}, approval {tool.approval})"
            )
        if o.remind_every is not None and tool.on_approval_timeout != "escalate":
            problems.append(
                f"tool options for {name!r}: remind_every needs on_approval_timeout='escalate'"
            )
    return "\n".join(problems)


def applied(tools: list[ToolSpec], options: Mapping[str, ToolOverride]) -> list[ToolSpec]:
    """`tools` with each one's options set over its own (a name no tool has changes nothing)."""
    out = []
    for tool in tools:
        given = options.get(tool.name)
        if given is None:
            out.append(tool)
            continue
        update = given.model_dump(exclude_none=True)
        out.append(tool.model_copy(update=update))
    return out
