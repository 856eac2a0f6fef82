"""`Agent`: the code-side definition of an agent, turned into an `AgentSpec` when a run starts."""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import InitVar, dataclass, field
from datetime import timedelta
from fnmatch import fnmatchcase
from typing import Any, Literal

from pydantic import BaseModel
from temporalio.exceptions import ApplicationError

from waypoint._providers.scripts import SCRIPTED_MODEL_ID, Script
from waypoint._tools import ApprovalRule, Tool, ToolOptions, ToolRegistry
from waypoint.errors import ToolDefinitionError
from waypoint.mcp.config import MCPServer
from waypoint.mcp.toolset import MCPToolset
from waypoint.protocol import (
    AgentSpec,
    HistoryLimits,
    Limits,
    ModelSettings,
    ServerToolSpec,
    SizeLimits,
    ToolOverride,
    ToolSpec,
)
from waypoint.protocol.output import FINAL_TOOL, final_tool
from waypoint.protocol.policy import ApprovalPolicy
from waypoint.protocol.spec import DURABILITIES, Durability
from waypoint.protocol.tool_options import applied, refusal

_SNAPSHOT = (
    "name model system limits on_change plan_version approval_hash policy signed_decisions "
    "decision_max_age history durability"
).split()
"""The fields a run's `AgentSpec` takes from its `Agent` as they are."""


@dataclass
class Agent:
    """A Claude agent: its model, prompt, tools and limits.

    Args:
        name: How runs refer to it (`waypoint start NAME "task"`).
        model: The Anthropic model id, e.g. `claude-sonnet-4-6`.
        system: The system prompt.
        tools: The tools it may call.
        limits: Turn, token and cost budgets; reaching one parks the run.
        on_change: What a resumed run does when a tool it needs changed or vanished:
            `refuse` parks it; `replan` adopts the new tools, and nothing else of the build.
        script: Replies for the offline scripted model, used when no API key is set.
        plan_version: Bump it when the agent's behaviour changes on purpose.
        settings: Thinking, effort, prompt caching, tool choice and fan-out, compaction.
        approval_hash: `required`: an approval must name the arguments hash it reviewed (the
            CLI fills it in); `optional` accepts a bare step id.
        output_type: A pydantic model the final answer must fit: the model ends the run by
            calling `final_answer` with it, and `RunResult.output_as(output_type)` returns it.
        max_output_retries: Invalid final answers the model may correct before the run parks.
        versioning: On a versioned worker (see `waypoint._operations.deploys`): `pinned` runs
            finish on the build they started on; `auto_upgrade` runs move to the current build at
            their next step, so `on_change` and replay must cope with the new build's code.
        policy: Approval rules over tools and arguments (allow, deny, ask), snapshotted at
            start and changeable on a live run (`waypoint policy RUN set`).
        mcp: MCP servers whose classified tools the agent may call (`waypoint.mcp`).
        server_tools: Claude's own tools, run by the Messages API (`waypoint.server_tools`:
            web search, web fetch, code execution, tool search); Claude only.
        signed_decisions: Accept approve, reject, resolve and policy changes only when signed
            by the reviewer they name (`waypoint._security.signing`); others are refused and
            recorded.
        decision_max_age: With `signed_decisions`, how old a signature may be when a worker
            verifies it; an older one is refused and recorded (the reviewer signs again).
        history: When its runs continue-as-new and what they keep verbatim
            (`waypoint.HistoryLimits`); a run started with its own budget keeps that one.
        size_limits: How deep and large a tool input or client answer, and how large a tool
            result, may be before history holds it (`waypoint.SizeLimits`; the defaults fit
            Temporal's).
        durability: `step`: every call is its own activity, saved before the next begins.
            `turn`: the `pure` and `read` calls of one reply run as local activities in one
            workflow task, saved together (fewer events and server actions, faster); a crash
            may run that turn's reads again, never an effect or a model call. A run can pick
            its own (`waypoint start --durability`).
        tool_options: Per-tool options over the tools' own on this worker, by tool name
            (`ToolOverride`); set them with `with_tool_options`, not by hand.
        bounds: The old name of `size_limits`; it warns, and goes at the first release.
    """

    name: str
    model: str
    system: str
    tools: Sequence[Tool] = ()
    limits: Limits = field(default_factory=Limits)
    on_change: Literal["refuse", "replan"] = "refuse"
    script: Script | None = None
    plan_version: int = 1
    settings: ModelSettings = field(default_factory=ModelSettings)
    approval_hash: Literal["required", "optional"] = "required"
    output_type: type[BaseModel] | None = None
    max_output_retries: int = 2
    versioning: Literal["pinned", "auto_upgrade"] = "pinned"
    policy: ApprovalPolicy | None = None
    mcp: Sequence[MCPServer] = ()
    server_tools: Sequence[ServerToolSpec] = ()
    signed_decisions: bool = False
    decision_max_age: timedelta = timedelta(days=1)
    history: HistoryLimits | None = None
    size_limits: SizeLimits | None = None
    durability: Durability = "step"
    tool_options: Mapping[str, ToolOverride] = field(default_factory=dict)
    bounds: InitVar[SizeLimits | None] = None

    def __post_init__(self, bounds: SizeLimits | None = None) -> None:
        if bounds is not None:
            warnings.warn(
                "Agent(bounds=...) is now Agent(size_limits=...); bounds goes at the first release",
                DeprecationWarning,
                stacklevel=3,
            )
            self.size_limits = self.size_limits or bounds
        if self.durability not in DURABILITIES:
            raise ToolDefinitionError(
                f"agent {self.name!r}: durability {self.durability!r} is not one of "
                f"{', '.join(DURABILITIES)}"
            )
        self.registry = ToolRegistry(self.tools)
        if self.output_type is not None and self.registry.get(FINAL_TOOL) is not None:
            raise ToolDefinitionError(
                f"agent {self.name!r}: a tool named {FINAL_TOOL!r} clashes with the final "
                "answer tool of output_type; rename the tool"
            )
        # --- MCP: classified tools of the agent's servers, discovered on the worker ---
        taken = {t.name for t in self.tools} | ({FINAL_TOOL} if self.output_type else set())
        for server_tool in self.server_tools:
            if server_tool.name in taken:
                raise ToolDefinitionError(
                    f"agent {self.name!r}: a tool named {server_tool.name!r} clashes with "
                    "Claude's server tool of that name; rename the tool"
                )
            taken.add(server_tool.name)
        self.mcp_tools = MCPToolset(self.mcp, taken)
        self._check_policy()
        self._check_tool_options()

    def with_tool_options(self, options: Mapping[str, ToolOverride | Mapping[str, Any]]) -> Agent:
        """This agent with per-tool options over its tools' own: for one worker, no re-import.

        `agent.with_tool_options({"fares": {"fresh_for": timedelta(seconds=1)}})` in a test or
        an environment's `--app` function; the agent's module stays as it is. Runs started on
        this worker snapshot them (a run's own `tool_options` go over these).
        """
        given = {name: ToolOverride.model_validate(o) for name, o in options.items()}
        return dataclasses.replace(self, tool_options={**self.tool_options, **given})

    def _check_tool_options(self) -> None:
        """Refuse options for a tool the agent lacks, or that its tool cannot take."""
        mcp = set(self.mcp_tools.names())  # listed on the worker: checked when the spec is made
        mine = {n: o for n, o in self.tool_options.items() if n not in mcp}
        if why := refusal([t.spec() for t in self.tools], mine):
            raise ToolDefinitionError(f"agent {self.name!r}: {why}")

    def _check_policy(self) -> None:
        """Refuse a rule that names no tool: a typo would leave the call it meant unguarded.

        MCP tools count by the names their servers' classes give them (with the prefix): only
        classified tools are ever offered, so these are known before any server is listed.
        """
        names = [t.name for t in self.tools] + self.mcp_tools.names()
        for rule in self.policy.rules if self.policy is not None else []:
            if not any(fnmatchcase(name, rule.tool) for name in names):
                raise ToolDefinitionError(
                    f"agent {self.name!r}: policy rule {rule.label()!r} names no tool of the "
                    f"agent, Python or MCP (it has: {', '.join(names) or 'none'}); fix the tool "
                    "name or glob, or classify the MCP tool in its server's `tools`"
                )

    def tool(self, name: str) -> Tool | None:
        """The tool of that name, Python or MCP, if this worker has it."""
        return self.registry.get(name) or self.mcp_tools.get(name)

    async def discover(self) -> None:
        """List the MCP servers' tools (in `load_spec`, so the run's snapshot records them)."""
        await self.mcp_tools.discover()

    async def refresh_tool(self, name: str, schema_hash: str) -> None:
        """Re-list an MCP tool's server when this worker's copy differs from a run's snapshot."""
        await self.mcp_tools.refresh(name, schema_hash)

    async def aclose(self) -> None:
        """Close the agent's MCP sessions (stdio servers exit)."""
        await self.mcp_tools.aclose()

    def spec(self, provider: Literal["anthropic", "scripted"]) -> AgentSpec:
        """Snapshot what a run depends on."""
        # Imported here: `import waypoint` stays light (the workflow sandbox imports it per run).
        from waypoint._providers.claude.catalog import model_limits
        from waypoint._providers.pricing import call_price, price_known

        known = model_limits(self.model)
        fill = {
            "context_window": known.context_window,
            "max_output_tokens": known.max_output_tokens,
        }
        settings = self.settings.model_copy(
            update={k: v for k, v in fill.items() if k not in self.settings.model_fields_set}
        )
        final, output = [], {}
        if self.output_type is not None:
            final = [final_tool(self.output_type)]
            output = {
                "output_schema": final[0].input_schema,
                "output_name": self.output_type.__name__,
                "max_output_retries": self.max_output_retries,
            }
        return AgentSpec(
            **{name: getattr(self, name) for name in _SNAPSHOT},
            provider=provider,
            tools=self._tool_specs() + final,
            settings=settings,
            bounds=self.size_limits,
            server_tools=list(self.server_tools),
            price_known=provider == "scripted" or price_known(self.model),
            price=call_price(
                self.model if provider == "anthropic" else SCRIPTED_MODEL_ID, settings.cache
            ),
            **output,
        )

    def _tool_specs(self) -> list[ToolSpec]:
        """Its tools' contracts, with this worker's options over them where they fit."""
        tools = [t.spec() for t in self.tools] + self.mcp_tools.specs()
        fits = {n: o for n, o in self.tool_options.items() if not refusal(tools, {n: o})}
        return applied(tools, fits)

    def as_tool(
        self,
        *,
        input_type: type[BaseModel],
        output_type: type[BaseModel] | None = None,
        name: str | None = None,
        description: str | None = None,
        requires_approval: ApprovalRule = False,
        approval_timeout: timedelta | None = None,
    ) -> SubagentTool:
        """This agent as a tool of another: each call runs it as a child workflow.

        Args:
            input_type: The arguments the parent's model gives, validated like any tool's;
                the child's task is their JSON.
            output_type: The child's final answer type (its `output_type`; adopted if it has
                none). The parent's model reads the answer as JSON; None: the child's text.
            name: The tool's name; defaults to the agent's.
            description: What the parent's model is told; defaults from the system prompt.
            requires_approval: `True`, or a predicate over the validated arguments.
            approval_timeout: How long a person has to decide; None waits for ever.
        """
        if output_type is not None:
            if self.output_type not in (None, output_type):
                raise ToolDefinitionError(
                    f"agent {self.name!r} already answers with {self.output_type.__name__}; "
                    f"as_tool(output_type={output_type.__name__}) must name the same type"
                )
            self.output_type = output_type
            self.__post_init__()  # re-check the final answer tool's name
        options = ToolOptions(
            "effect",
            name=name or self.name,
            description=description or f"Delegate to the {self.name} agent: {self.system}",
            idempotent=True,  # the child's id and effect keys derive from this step's key
            requires_approval=requires_approval,
            approval_timeout=approval_timeout,
        )
        return SubagentTool(self, input_type, options)


# --- sub-agents as tools ----------------------------------------------------------------------
# Sub-agents as tools: `Agent.as_tool(...)` makes an agent one tool of another.
#
# A sub-agent tool is a tool source like any other: its calls go through the one funnel
# (validation against `input_type`, approval, ledger, effect key) and only then run, as a child
# workflow (`waypoint._workflows.children`) instead of an activity. It is an `effect` tool made
# safe by its deterministic child workflow id: a resumed parent re-attaches to the same child,
# and the child's effect keys extend the parent step's key.


class SubagentTool(Tool):
    """A tool whose call runs `agent` on the validated arguments, as a child workflow."""

    def __init__(self, agent: Agent, input_type: type[BaseModel], options: ToolOptions) -> None:
        async def never_run(args: BaseModel) -> Any:
            raise ApplicationError(
                f"sub-agent tool for {agent.name!r} runs as a child workflow, not an activity",
                type="SubagentNotAnActivity",
                non_retryable=True,
            )

        never_run.__annotations__ = {"args": input_type, "return": Any}
        super().__init__(never_run, options)
        self.agent = agent

    def _runs_as(self) -> tuple[dict[str, Any], dict[str, Any]]:
        output = self.agent.output_type.__name__ if self.agent.output_type else ""
        return {"runs_as": "child", "child_agent": self.agent.name}, {"output": output}


def with_children(agents: Iterable[Agent]) -> list[Agent]:
    """The agents and, recursively, every agent their sub-agent tools run (once each by name).

    A listed agent stands in for the one of its name a sub-agent tool holds: a child given
    its own tool options on a worker runs with them.
    """
    found: dict[str, Agent] = {}
    todo = list(agents)
    listed = {id(a) for a in todo}
    while todo:
        agent = todo.pop(0)
        known = found.get(agent.name)
        if known is agent:
            continue
        if known is not None and id(known) in listed and id(agent) not in listed:
            continue  # the listed one (`with_tool_options`) stands in for a tool's
        if known is not None:
            raise ToolDefinitionError(f"two different agents are named {agent.name!r}")
        found[agent.name] = agent
        todo += [t.agent for t in agent.tools if isinstance(t, SubagentTool)]
    return list(found.values())
