"""Typed results: the `final_answer` tool an agent with an `output_type` ends its run with.

The model is offered `final_answer`, whose input schema is the output type's JSON schema; it is
never run as a tool. The workflow has the worker validate each call with the pydantic class
(`waypoint.validate_output`), and sends the errors back to the model until the answer fits.
Works the same for Claude and the scripted model.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ValidationError

from waypoint.protocol import OutputVerdict, ToolSpec
from waypoint.protocol.hashing import sha256_hex

FINAL_TOOL = "final_answer"
"""The tool the model calls with its final answer."""


def final_tool(output_type: type[BaseModel]) -> ToolSpec:
    """The `final_answer` tool's contract, as the model sees it."""
    schema = output_type.model_json_schema()
    description = (
        f"Give your final answer as a {output_type.__name__}. Call this once, alone, when the "
        "task is done: its input is the answer. If it reports errors, fix them and call it again."
    )
    contract = {"name": FINAL_TOOL, "description": description, "input_schema": schema}
    return ToolSpec(
        name=FINAL_TOOL,
        description=description,
        input_schema=schema,
        kind="pure",
        schema_hash=sha256_hex(contract),
    )


def validate(output_type: type[BaseModel], value: dict[str, Any]) -> OutputVerdict:
    """The value as the output type normalises it, or its errors in words the model can act on."""
    try:
        typed = output_type.model_validate(value)
    except ValidationError as err:
        problems = "\n".join(
            f"- {'.'.join(str(p) for p in e['loc']) or '(answer)'}: {e['msg']}"
            for e in err.errors(include_url=False)
        )
        return OutputVerdict(valid=False, errors=problems)
    return OutputVerdict(valid=True, value=typed.model_dump(mode="json"))
