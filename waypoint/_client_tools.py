"""`client_tool`: a tool with no worker body, answered by a client (`waypoint answer`).

Use it to ask the requester a question, or for data only the requester's machine has. A call
goes through the same funnel as any tool (its arguments are validated, approval applies, the
step is recorded), then the run waits, holding no process, in `awaiting_answer` until a client
sends a result that fits the output type; after `timeout` the model is told nobody answered.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from pydantic import BaseModel

from waypoint._tools import ApprovalRule, Tool, ToolOptions
from waypoint.errors import ToolDefinitionError


class ClientTool(Tool):
    """A tool whose result a client supplies; its spec carries the output schema."""

    def __init__(
        self, input_type: type[BaseModel], output_type: type[BaseModel], options: ToolOptions
    ) -> None:
        name = options.name

        async def answered_by_a_client(args: BaseModel) -> None:
            raise RuntimeError(f"{name} is answered by a client, never run on a worker")

        answered_by_a_client.__annotations__ = {"args": input_type, "return": output_type}
        super().__init__(answered_by_a_client, options)
        self.output_type = output_type

    def _runs_as(self) -> tuple[dict[str, Any], dict[str, Any]]:
        return {"runs_as": "client", "output_schema": self.output_type.model_json_schema()}, {}


def client_tool(
    name: str,
    input_type: type[BaseModel],
    output_type: type[BaseModel],
    *,
    description: str | None = None,
    timeout: timedelta | None = None,
    remind_every: timedelta | None = None,
    escalate_with: str | None = None,
    requires_approval: ApprovalRule = False,
    approval_timeout: timedelta | None = None,
) -> ClientTool:
    """Declare a tool that a client answers.

    Args:
        name: The name the model calls it by.
        input_type: What the model sends (its JSON schema is what Claude sees).
        output_type: What a client must answer; an answer that does not fit is refused.
        description: What the model is told; defaults to the input type's docstring.
        timeout: How long a client has to answer; then the model is told nobody did.
            None waits for ever.
        remind_every: While the question waits, run `escalate_with` at this interval.
        escalate_with: Name of the agent's effect tool that notifies someone (its argument
            model is `waypoint.Escalation`).
        requires_approval: `True`, or a predicate over the arguments: a person approves the
            question before it is asked.
        approval_timeout: How long that approval may take (then the call is rejected).
    """
    if remind_every is not None and not escalate_with:
        raise ToolDefinitionError(
            f"client tool {name!r}: remind_every needs escalate_with=NAME, an effect tool of "
            "the same agent that takes `waypoint.Escalation` arguments"
        )
    options = ToolOptions(
        "read",
        name=name,
        description=description or input_type.__doc__ or name,
        timeout=timeout,
        remind_every=remind_every,
        escalate_with=escalate_with,
        requires_approval=requires_approval,
        approval_timeout=approval_timeout,
    )
    return ClientTool(input_type, output_type, options)
