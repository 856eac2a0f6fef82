"""`validate_output`: check a `final_answer` against the agent's `output_type` on the worker.

The workflow cannot import user classes, so the worker that has the agent validates.
"""

from __future__ import annotations

from collections.abc import Mapping

from temporalio import activity
from temporalio.exceptions import ApplicationError

from waypoint._agent import Agent
from waypoint.protocol import OutputCheck, OutputVerdict
from waypoint.protocol.output import final_tool, validate

OUTPUT_CHANGED = "OutputTypeChanged"


class OutputActivities:
    """Knows the worker's agents and their output types."""

    def __init__(self, agents: Mapping[str, Agent]) -> None:
        self.agents = dict(agents)

    @activity.defn(name="waypoint.validate_output")
    async def validate_output(self, check: OutputCheck) -> OutputVerdict:
        """Validate with pydantic; a type that changed since the run began is refused."""
        agent = self.agents.get(check.agent)
        output_type = agent.output_type if agent else None
        if output_type is None:
            raise ApplicationError(
                f"this worker has no output_type for agent {check.agent!r}; deploy a worker "
                "that has it, then `waypoint resume` the run",
                type=OUTPUT_CHANGED,
                non_retryable=True,
            )
        if final_tool(output_type).schema_hash != check.schema_hash:
            raise ApplicationError(
                f"the output_type of agent {check.agent!r} ({output_type.__name__}) changed "
                "since the run began; deploy a worker with the type as the run began, then "
                "`waypoint resume` the run",
                type=OUTPUT_CHANGED,
                non_retryable=True,
            )
        return validate(output_type, check.value)
