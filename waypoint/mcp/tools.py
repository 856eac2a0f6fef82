"""`MCPTool`: one discovered MCP tool as a Waypoint `Tool`, so it runs through the one funnel.

Arguments are checked against the tool's JSON schema before approval, like a Python tool's; the
idempotency argument is hidden from the model and filled with `ctx.effect_key`. Each call first
re-lists the tool on the open session: a tool whose contract changed since the run's snapshot is
not called (`ToolChanged`, so the agent's `on_change` decides). An `isError` result answers the
model as an error; a transport failure is an exception, so an effect is reconciled, never
reported as failed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, model_validator
from temporalio.exceptions import ApplicationError

from waypoint._tools import Tool, ToolContext, ToolOptions
from waypoint.errors import ToolReportedError
from waypoint.mcp.config import MCPServer, MCPToolClass
from waypoint.mcp.connection import Connection, error_text, rendered, value_of
from waypoint.protocol import ToolSpec
from waypoint.protocol.hashing import sha256_hex
from waypoint.protocol.vocabulary import TOOL_CHANGED

if TYPE_CHECKING:
    from mcp.types import Tool as Discovered


def contract_hash(
    server: MCPServer, tool_class: MCPToolClass, found: Discovered, lookup: Discovered | None
) -> str:
    """What a run's snapshot pins: the server's schema, the class, and the lookup's schema."""
    rule = tool_class.requires_approval
    return sha256_hex(
        {
            "server": server.name,
            "name": server.prefix + found.name,
            "description": found.description or "",
            "input_schema": found.input_schema,
            "kind": tool_class.kind,
            "idempotency_argument": tool_class.idempotency_argument,
            "reconcile_tool": tool_class.reconcile_tool,
            "reconcile_schema": lookup.input_schema if lookup else None,
            "approval": "predicate" if callable(rule) else bool(rule),
        }
    )


class MCPTool(Tool):
    """A tool of an MCP server, classified by the agent's configuration."""

    def __init__(
        self,
        server: MCPServer,
        connection: Connection,
        tool_class: MCPToolClass,
        found: Discovered,
        lookup: Discovered | None = None,
    ) -> None:
        self.server = server
        self.connection = connection
        self.tool_class = tool_class
        self.remote_name = found.name
        self.lookup_name = lookup.name if lookup else None
        self.visible_schema = _without(found.input_schema, tool_class.idempotency_argument)
        self.contract = contract_hash(server, tool_class, found, lookup)
        args_model = _arguments_model(self.visible_schema, tool_class.idempotency_argument)

        async def call(args: BaseModel, ctx: ToolContext) -> Any:
            return await self._call(args, ctx)

        call.__annotations__ = {"args": args_model, "ctx": ToolContext, "return": Any}
        rule = tool_class.requires_approval
        approval = (lambda a: bool(rule(a.model_dump()))) if callable(rule) else rule
        reconcile = None
        if tool_class.reconcile_tool:
            reconcile = self._look_up
        elif tool_class.kind == "effect" and not tool_class.idempotency_argument:
            reconcile = self._cannot_tell
        options = ToolOptions(
            tool_class.kind,
            name=server.prefix + found.name,
            description=found.description or found.name,
            idempotent=bool(tool_class.idempotency_argument),
            reconcile=reconcile,
            requires_approval=approval,
            approval_timeout=tool_class.approval_timeout,
            timeout=tool_class.timeout,
            max_attempts=tool_class.max_attempts,
        )
        super().__init__(call, options)

    def _build_spec(self) -> ToolSpec:
        spec = super()._build_spec()
        return spec.model_copy(
            update={"input_schema": self.visible_schema, "schema_hash": self.contract}
        )

    def _arguments(self, args: BaseModel, ctx: ToolContext) -> dict[str, Any]:
        arguments = args.model_dump()
        if self.tool_class.idempotency_argument:
            arguments[self.tool_class.idempotency_argument] = ctx.effect_key
        return arguments

    async def _call(self, args: BaseModel, ctx: ToolContext) -> Any:
        await self._check_unchanged()
        result = await self.connection.call_tool(self.remote_name, self._arguments(args, ctx))
        if result.is_error:
            raise ToolReportedError(error_text(result))
        return rendered(result)

    async def _check_unchanged(self) -> None:
        """Refuse to call a tool whose contract changed since this worker discovered it."""
        tools = {t.name: t for t in await self.connection.list_tools()}
        found = tools.get(self.remote_name)
        lookup = tools.get(self.lookup_name) if self.lookup_name else None
        current = found and contract_hash(self.server, self.tool_class, found, lookup)
        if current != self.contract:
            raise ApplicationError(
                f"MCP tool {self.remote_name!r} of server {self.server.name!r} "
                f"{'changed' if found else 'is gone'} since this run's snapshot",
                type=TOOL_CHANGED,
                non_retryable=True,
            )

    async def _look_up(self, args: BaseModel, ctx: ToolContext) -> Any:
        """Ask the reconcile tool; None when it says the effect did not happen."""
        assert self.lookup_name is not None
        result = await self.connection.call_tool(self.lookup_name, self._arguments(args, ctx))
        if result.is_error:
            raise RuntimeError(f"{self.lookup_name} could not tell: {error_text(result)}")
        value = value_of(result)
        if value is None or value == "" or value == "null":
            return None
        return rendered(result)

    async def _cannot_tell(self, args: BaseModel, ctx: ToolContext) -> Any:
        raise RuntimeError(
            f"{self.name} has no idempotency argument and no reconcile tool: a person must "
            "check downstream whether it happened"
        )


def _without(schema: dict[str, Any], argument: str | None) -> dict[str, Any]:
    """The schema the model sees: the idempotency argument left out."""
    if not argument:
        return schema
    properties = {k: v for k, v in schema.get("properties", {}).items() if k != argument}
    required = [r for r in schema.get("required", []) if r != argument]
    visible = {**schema, "properties": properties}
    if "required" in schema:
        visible["required"] = required
    return visible


def _arguments_model(schema: dict[str, Any], hidden: str | None) -> type[BaseModel]:
    """A pydantic model that checks a dict against the JSON schema and keeps it as it is."""
    from jsonschema.validators import validator_for

    validator = validator_for(schema)(schema)

    class MCPArguments(BaseModel):
        model_config = ConfigDict(extra="allow")

        @model_validator(mode="before")
        @classmethod
        def _valid(cls, data: Any) -> Any:
            if hidden and isinstance(data, dict) and hidden in data:
                raise ValueError(f"{hidden!r} is filled in by Waypoint (the effect key); omit it")
            problems = [
                f"{'.'.join(str(p) for p in e.absolute_path) or '(input)'}: {e.message}"
                for e in validator.iter_errors(data)
            ]
            if problems:
                raise ValueError("; ".join(problems))
            return data

    return MCPArguments
