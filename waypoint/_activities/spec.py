"""`load_spec`: the worker's current definition of an agent, snapshotted by a starting run."""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import KW_ONLY, dataclass

from temporalio import activity
from temporalio.exceptions import ApplicationError

from waypoint._activities.heartbeat import heartbeating
from waypoint._agent import Agent
from waypoint._operations.deploys import auto_upgrade
from waypoint._providers.claude.catalog import server_tool_refusal
from waypoint.protocol import AgentSpec, LoadSpecInput
from waypoint.protocol.vocabulary import MODEL_NOT_CONFIGURED, UNKNOWN_MODEL


@dataclass(eq=False)  # compared and hashed as itself, like its bound activity methods
class SpecActivities:
    """Knows the worker's agents and whether Claude can be called from here."""

    agents: Mapping[str, Agent]
    _: KW_ONLY
    use_anthropic: bool
    check_model: Callable[[str], Awaitable[str | None]] | None = None
    """Asks the API whether a model id exists (`AnthropicModel.check_model`)."""
    versioned: bool = False
    """The worker belongs to a deployment: its runs are pinned unless the agent says not."""
    refuse_plaintext: bool = False
    """The worker encrypts: a run snapshots that it refuses what arrives unencrypted."""

    @activity.defn(name="waypoint.load_spec")
    async def load_spec(self, input: LoadSpecInput) -> AgentSpec:
        """Snapshot the agent; with no API key the agent's script stands in for Claude."""
        return await heartbeating(self._load(input), "load_spec")  # MCP lists, the model check

    async def _load(self, input: LoadSpecInput) -> AgentSpec:
        agent = self.agents.get(input.agent)
        if agent is None:
            known = ", ".join(sorted(self.agents)) or "none"
            raise ApplicationError(
                f"no agent named {input.agent!r} on this worker (it has: {known})",
                type="AgentNotFound",
                non_retryable=True,
            )
        if self.versioned and agent.versioning == "auto_upgrade":
            info = activity.info()
            assert info.workflow_id and info.workflow_run_id  # a workflow's activity
            await auto_upgrade(activity.client(), info.workflow_id, info.workflow_run_id)
        await agent.discover()  # MCP tool lists: recorded in the snapshot this returns
        if input.provider == "scripted" or (input.provider is None and not self.use_anthropic):
            if agent.script is not None:
                return self._sealed(agent.spec("scripted"))
        elif self.use_anthropic:
            # A replan (the run's provider named) adopts tools only: this build's model is not
            # the run's, so it is not judged here.
            if input.provider is None and (problem := await self._model_refusal(agent)):
                # parked as a model the run cannot use: a fixed deploy `resume`s it
                raise ApplicationError(problem, type=UNKNOWN_MODEL, non_retryable=True)
            return self._sealed(agent.spec("anthropic"))
        raise ApplicationError(
            f"agent {input.agent!r} has no offline script and ANTHROPIC_API_KEY is not set on "
            "the worker: set the key, or give the agent a `script` for the scripted model",
            type=MODEL_NOT_CONFIGURED,
            non_retryable=True,
        )

    async def _model_refusal(self, agent: Agent) -> str | None:
        """Why a run cannot start on the agent's model: unknown to the API, or its server tools."""
        if self.check_model is not None and (problem := await self.check_model(agent.model)):
            return problem
        if problems := [
            why for t in agent.server_tools if (why := server_tool_refusal(agent.model, t.type))
        ]:
            return (
                f"agent {agent.name!r}: {'; '.join(problems)}: pick another model or drop the tool"
            )
        return None

    def _sealed(self, spec: AgentSpec) -> AgentSpec:
        """The snapshot, salted and saying whether it refuses unencrypted messages.

        A fresh secret salt for the run's step hashes: a guessed argument cannot be confirmed.
        """
        update: dict[str, object] = {"hash_salt": secrets.token_hex(16)}
        if self.refuse_plaintext:
            update["refuse_plaintext"] = True
        return spec.model_copy(update=update)
