"""Sub-agents as tools: `Agent.as_tool(...)` makes an agent one tool of another.

A sub-agent tool is a tool source like any other: its calls go through the one funnel
(validation against `input_type`, approval, ledger, effect key) and only then run, as a child
workflow (`waypoint.workflows.children`) instead of an activity. It is an `effect` tool made
safe by its deterministic child workflow id: a resumed parent re-attaches to the same child,
and the child's effect keys extend the parent step's key.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel
from temporalio.exceptions import ApplicationError

from waypoint.errors import ToolDefinitionError
from waypoint.hashing import sha256_hex
from waypoint.models import ToolSpec
from waypoint.tools import ApprovalRule, Tool

if TYPE_CHECKING:
    from waypoint.agent import Agent


class SubagentTool(Tool):
    """A tool whose call runs `agent` on the validated arguments, as a child workflow."""

    def __init__(
        self,
        agent: Agent,
        *,
        input_type: type[BaseModel],
        name: str | None = None,
        description: str | None = None,
        requires_approval: ApprovalRule = False,
        approval_timeout: timedelta | None = None,
    ) -> None:
        async def never_run(args: BaseModel) -> Any:
            raise ApplicationError(
                f"sub-agent tool for {agent.name!r} runs as a child workflow, not an activity",
                type="SubagentNotAnActivity",
                non_retryable=True,
            )

        never_run.__annotations__ = {"args": input_type, "return": Any}
        super().__init__(
            never_run,
            kind="effect",
            name=name or agent.name,
            description=description or f"Delegate to the {agent.name} agent: {agent.system}",
            idempotent=True,  # the child's id and effect keys derive from this step's key
            requires_approval=requires_approval,
            approval_timeout=approval_timeout,
        )
        self.agent = agent

    def _build_spec(self) -> ToolSpec:
        spec = super()._build_spec()
        contract = {
            "name": spec.name,
            "description": spec.description,
            "input_schema": spec.input_schema,
            "kind": spec.kind,
            "runs_as": "child",
            "child_agent": self.agent.name,
            "output": self.agent.output_type.__name__ if self.agent.output_type else "",
        }
        return spec.model_copy(
            update={
                "runs_as": "child",
                "child_agent": self.agent.name,
                "schema_hash": sha256_hex(contract),
            }
        )


def as_tool(
    agent: Agent,
    *,
    input_type: type[BaseModel],
    output_type: type[BaseModel] | None = None,
    name: str | None = None,
    description: str | None = None,
    requires_approval: ApprovalRule = False,
    approval_timeout: timedelta | None = None,
) -> SubagentTool:
    """See `Agent.as_tool`."""
    if output_type is not None:
        if agent.output_type not in (None, output_type):
            raise ToolDefinitionError(
                f"agent {agent.name!r} already answers with {agent.output_type.__name__}; "
                f"as_tool(output_type={output_type.__name__}) must name the same type"
            )
        agent.output_type = output_type
        agent.__post_init__()  # re-check the final answer tool's name
    return SubagentTool(
        agent,
        input_type=input_type,
        name=name,
        description=description,
        requires_approval=requires_approval,
        approval_timeout=approval_timeout,
    )


def with_children(agents: Iterable[Agent]) -> list[Agent]:
    """The agents and, recursively, every agent their sub-agent tools run (once each by name)."""
    found: dict[str, Agent] = {}
    todo = list(agents)
    while todo:
        agent = todo.pop(0)
        known = found.get(agent.name)
        if known is agent:
            continue
        if known is not None:
            raise ToolDefinitionError(f"two different agents are named {agent.name!r}")
        found[agent.name] = agent
        todo += [t.agent for t in agent.tools if isinstance(t, SubagentTool)]
    return list(found.values())
