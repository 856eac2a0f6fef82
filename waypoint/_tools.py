"""The `@tool` decorator, the `ToolContext` effects receive, and the registry.

A tool is a plain async function whose first parameter is a pydantic model (its JSON schema is
what Claude sees) and, optionally, a `ToolContext`. Its class says how Waypoint may run it:
`pure` tools may run as local activities, `read` results are recorded and never re-read on
resume, and `effect` tools get a stable `ctx.effect_key` and must be made safe: either
`idempotent=True` (the downstream system deduplicates on the key) or a `reconcile` function that
asks the downstream system whether the effect already happened.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import KW_ONLY, dataclass, replace
from datetime import timedelta
from typing import Any, Literal, get_type_hints

from pydantic import BaseModel

from waypoint._content import check
from waypoint.errors import ToolDefinitionError
from waypoint.protocol import (
    DocumentBlock,
    ImageBlock,
    RichBlock,
    SearchResultBlock,
    TextBlock,
    ToolKind,
    ToolSpec,
)
from waypoint.protocol.hashing import sha256_hex

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ToolContext:
    """What a tool knows about the step it runs in.

    `effect_key` is the same on every attempt, every resume and across continue-as-new, and new
    for a later run that reuses the workflow id: hand it to the downstream system as its
    idempotency key.
    """

    step_id: str
    attempt: int
    effect_key: str | None
    workflow_id: str
    run_id: str


ApprovalRule = bool | Callable[[Any], bool]
Reconcile = Callable[[Any, ToolContext], Awaitable[Any]] | Callable[[Any, ToolContext], Any]
"""An `async def`, or a plain `def` that runs in a thread like a plain-def tool."""


_IN_SPEC = (
    "approval_timeout on_approval_timeout escalate_with remind_every timeout max_attempts fresh_for"
).split()
"""The options a tool's `ToolSpec` carries as they are."""


@dataclass(frozen=True)
class ToolOptions:
    """How Waypoint may run a tool: its class, approval, timeouts, retries and recovery.

    The one list of a tool's options: `tool` is this class, so `@tool("effect",
    idempotent=True)` makes the options and calling them on a function makes the `Tool`;
    `client_tool`, `Agent.as_tool` and MCP tools build them too.
    """

    kind: ToolKind
    """`pure`, `read` or `effect`."""
    _: KW_ONLY
    name: str | None = None
    """The name the model calls it by; defaults to the function's name."""
    description: str | None = None
    """What the model is told; defaults to the docstring."""
    idempotent: bool = False
    """The downstream system deduplicates on `ctx.effect_key`, so re-running is safe."""
    reconcile: Reconcile | None = None
    """Looks the effect up by its key after a crash (or use `@my_tool.reconcile`)."""
    requires_approval: ApprovalRule = False
    """`True`, or a predicate over the validated arguments."""
    approval_timeout: timedelta | None = None
    """How long a person has to decide; None waits for ever."""
    on_approval_timeout: Literal["reject", "escalate"] = "reject"
    """`reject` tells the model nobody approved in time; `escalate` runs `escalate_with` and
    keeps waiting."""
    escalate_with: str | None = None
    """Name of the agent's effect tool that notifies someone (its argument model is
    `waypoint.Escalation`)."""
    remind_every: timedelta | None = None
    """After escalating, run `escalate_with` again at this interval."""
    timeout: timedelta | None = None
    """Start-to-close of one call; defaults to the run's `StepOptions.tool_timeout`."""
    max_attempts: int | None = None
    """Tries before giving up; defaults to `StepOptions.tool_max_attempts`. An effect whose
    tries run out is reconciled, never reported failed on a guess."""
    fresh_for: timedelta | None = None
    """A `read` tool's observations hold this long, by a recorded clock: before an effect runs
    (and before a model step) a recorded read older than this is read again as a new step; if
    it changed, the effect does not run and the model decides again with the new result."""
    fresh_key: Sequence[str] | Callable[[Any], Any] | None = None
    """With `fresh_for`: the part of the result that counts for "changed" when it is read
    again, as field names of the result (a dict or a pydantic model) or a function of the
    result; None compares the whole result (a `quoted_at` stamped on every answer would then
    make every refresh a change)."""
    anthropic_type: str | None = None
    """A tool whose schema Anthropic defines (`bash_20250124`, `text_editor_20250728`,
    `memory_20250818`, ...): the request names this type, not a schema, and the tool must have
    the name Anthropic gives it. It runs here, through the same approval, ledger and effect key
    as any tool; its argument model must accept what Claude sends for it."""

    def __call__(self, fn: Callable[..., Any]) -> Tool:
        """Declare `fn` a tool with these options (a plain `def` runs in a thread)."""
        return Tool(fn, self)


tool = ToolOptions
"""Declare a function as a tool: `@tool("effect", idempotent=True)` (see `ToolOptions`)."""


ANTHROPIC_NAMES = {
    "bash": "bash",
    "text_editor_20250124": "str_replace_editor",
    "text_editor": "str_replace_based_edit_tool",
    "memory": "memory",
    "computer": "computer",
}
"""The name each Anthropic-defined tool must have, by type (longest matching prefix wins)."""


def _check_anthropic_name(name: str, kind: str | None) -> None:
    if kind is None:
        return
    known = sorted((p for p in ANTHROPIC_NAMES if kind.startswith(p)), key=len, reverse=True)
    if known and ANTHROPIC_NAMES[known[0]] != name:
        raise ToolDefinitionError(
            f"tool {name!r}: Anthropic's {kind} tool must be named {ANTHROPIC_NAMES[known[0]]!r}"
        )


class Tool:
    """A registered tool: the function, its argument model and how it may be run (`options`)."""

    def __init__(self, fn: Callable[..., Any], options: ToolOptions) -> None:
        if options.max_attempts is not None and options.max_attempts < 1:
            raise ToolDefinitionError(f"tool {fn.__name__!r}: max_attempts must be at least 1")
        if options.on_approval_timeout == "escalate" and not options.escalate_with:
            raise ToolDefinitionError(
                f"tool {fn.__name__!r}: on_approval_timeout='escalate' needs escalate_with=NAME, "
                "an effect tool of the same agent that takes `waypoint.Escalation` arguments"
            )
        if options.fresh_for is not None and options.requires_approval:
            raise ToolDefinitionError(
                f"tool {fn.__name__!r}: fresh_for reads it again with no one asked, so it "
                "cannot also require approval"
            )
        if options.fresh_for is not None and (
            options.kind != "read" or options.fresh_for <= timedelta(0)
        ):
            raise ToolDefinitionError(
                f"tool {fn.__name__!r}: fresh_for is for a `read` tool, a positive timedelta "
                f"(got {options.kind!r}, {options.fresh_for!r}): what a pure tool returns never "
                "goes stale, and an effect is not read again"
            )
        if options.fresh_key is not None and options.fresh_for is None:
            raise ToolDefinitionError(
                f"tool {fn.__name__!r}: fresh_key says what counts when a `fresh_for` read is "
                "read again; give fresh_for too"
            )
        key = options.fresh_key
        if not (callable(key) or key is None) and (
            isinstance(key, str) or not key or not all(isinstance(f, str) for f in key)
        ):
            raise ToolDefinitionError(
                f"tool {fn.__name__!r}: fresh_key takes a list of field names or a function, "
                f"not {key!r}"
            )
        self.is_async = inspect.iscoroutinefunction(fn)
        """A plain `def` runs in a thread, so blocking work never freezes the worker's loop."""
        params = list(inspect.signature(fn).parameters)
        hints = get_type_hints(fn)
        args_model = hints.get(params[0]) if params else None
        if not (isinstance(args_model, type) and issubclass(args_model, BaseModel)):
            raise ToolDefinitionError(
                f"tool {fn.__name__!r}: its first parameter must be annotated with a pydantic "
                "model, e.g. `async def my_tool(args: MyToolArgs) -> str`"
            )
        self.fn = fn
        self.options = options
        """As declared; `name` and `description` below have their defaults filled in."""
        self.name = options.name or fn.__name__
        self.description = options.description or inspect.getdoc(fn) or self.name
        _check_anthropic_name(self.name, options.anthropic_type)
        self.args_model: type[BaseModel] = args_model
        self.takes_context = len(params) > 1
        self._spec: tuple[ToolOptions, ToolSpec] | None = None

    @property
    def kind(self) -> ToolKind:
        """`pure`, `read` or `effect`."""
        return self.options.kind

    def reconcile(self, fn: Reconcile) -> Reconcile:
        """Decorate the function that asks downstream whether this effect already happened.

        It receives the same arguments and context and returns the effect's result if it
        happened, `None` if it definitely did not, and raises if it cannot tell. An `async def`
        or a plain `def` (run in a thread, like a plain-def tool).
        """
        self.options = replace(self.options, reconcile=fn)
        return fn

    def check_safe(self) -> None:
        """Refuse an effect the library cannot make safe to retry."""
        o = self.options
        if self.kind == "effect" and not (o.idempotent or o.reconcile):
            raise ToolDefinitionError(
                f"effect tool {self.name!r} is neither idempotent nor reconcilable: pass "
                "`idempotent=True` if the downstream system deduplicates on `ctx.effect_key`, or "
                f"add `@{self.name}.reconcile` to look the effect up by its key"
            )

    def spec(self) -> ToolSpec:
        """The tool's contract as the workflow and the model see it (built once per `options`)."""
        if self._spec is None or self._spec[0] is not self.options:
            self._spec = (self.options, self._build_spec())
        return self._spec[1]

    def _runs_as(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """Where a tool with no worker body runs: spec fields, and what only its hash holds."""
        return {}, {}

    def _build_spec(self) -> ToolSpec:
        o = self.options
        rule = o.requires_approval
        fields, hashed = self._runs_as()
        contract: dict[str, Any] = {
            "name": self.name,
            "description": self.description,
            "input_schema": self.args_model.model_json_schema(),
            "kind": self.kind,
            **fields,
        }
        if o.anthropic_type:  # in the hash only when set: other tools' hashes stay as they were
            contract["anthropic_type"] = o.anthropic_type
        return ToolSpec(
            **contract,
            schema_hash=sha256_hex({**contract, **hashed}),
            approval="predicate" if callable(rule) else "always" if rule else "never",
            **{name: getattr(o, name) for name in _IN_SPEC},
        )

    def coerced(self, args: BaseModel) -> dict[str, Any]:
        """Validated arguments as JSON that validates to the same value: `"5000"` becomes 5000."""
        return args.model_dump(mode="json", by_alias=True, exclude_computed_fields=True)

    def fresh_basis(self, result: object) -> str:
        """The sha256 of what counts for "changed" in a `fresh_for` result; '' for the whole.

        A key that cannot be applied (no such fields on a text result, a function that
        raises) compares the whole result: a refresh may then refuse more, never less.
        """
        key = self.options.fresh_key
        if key is None:
            return ""
        try:
            if callable(key):
                return sha256_hex(key(result))
            whole = result.model_dump(mode="json") if isinstance(result, BaseModel) else result
            if isinstance(whole, dict) and all(field in whole for field in key):
                return sha256_hex({field: whole[field] for field in key})
        except Exception:  # a user's key function: any failure compares the whole result
            pass
        # A misspelt field would compare None with None for ever: never "changed" on a guess.
        logger.warning(
            "tool %r: its fresh_key does not apply; comparing the whole result", self.name
        )
        return ""

    async def __call__(self, args: BaseModel, ctx: ToolContext) -> Any:
        """Run the tool function; a synchronous one in a worker thread, to its end.

        A thread cannot be stopped, so a cancel (the tool's timeout, the run cancelled, the
        worker's drain time over) waits for it and returns what it did: reporting "cancelled"
        while it still ran would let a retry's reconcile answer "not happened" and run the
        effect twice.
        """
        call_args = (args, ctx) if self.takes_context else (args,)
        if self.is_async:
            return await self.fn(*call_args)
        running = asyncio.ensure_future(asyncio.to_thread(self.fn, *call_args))
        warned = False
        while True:
            try:
                return await asyncio.shield(running)
            except asyncio.CancelledError:
                if running.done():
                    return running.result()
                if not warned:
                    logger.warning(
                        "%s (%s) was stopped (its timeout, a cancel or a drain) while its "
                        "thread runs; a thread cannot be stopped, so the step waits for it, "
                        "heartbeating, and reports what it did",
                        self.name,
                        ctx.step_id,
                    )
                    warned = True


_RICH = (TextBlock, ImageBlock, DocumentBlock, SearchResultBlock)


def render_result(value: Any) -> str | list[RichBlock]:
    """Turn a tool's return value into what the model reads.

    A content block, or a list holding at least one (and otherwise only strings), becomes a
    list of blocks; a string stays as it is; a pydantic model or JSON-serialisable data becomes
    JSON. Anything else is refused rather than `str()`'d: the model would read a Python repr.

    Raises:
        TypeError: The value (or something inside it) cannot be serialised; names its type.
        ContentError: A block breaks the API's rules (wrong type for its bytes, too big).
    """
    if isinstance(value, str):
        return value
    if isinstance(value, _RICH):
        value = [value]
    if isinstance(value, list | tuple) and any(isinstance(v, _RICH) for v in value):
        return _blocks(value)
    if isinstance(value, BaseModel):
        return value.model_dump_json()
    try:
        return json.dumps(value)
    except (TypeError, ValueError) as err:
        raise TypeError(
            f"returned a value of type {type(value).__name__!r} that cannot be serialised "
            f"({err}); return a "
            "str, a pydantic model, JSON-serialisable data or content blocks "
            "(`waypoint.image`, `waypoint.document`, `waypoint.search_result`)"
        ) from None


def _blocks(values: list[Any] | tuple[Any, ...]) -> list[RichBlock]:
    blocks: list[RichBlock] = []
    for i, v in enumerate(values):
        if isinstance(v, str):
            if v:  # the API refuses empty text blocks
                blocks.append(TextBlock(text=v))
        elif isinstance(v, _RICH):
            check(v, f"content block {i}")
            blocks.append(v)
        else:
            raise TypeError(
                f"returned a list of content blocks whose item {i} is of type "
                f"{type(v).__name__!r}; "
                "such a list may hold only str, TextBlock, ImageBlock, DocumentBlock and "
                "SearchResultBlock"
            )
    return blocks


class ToolRegistry:
    """Tools by name, checked for safety when registered."""

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for t in tools:
            self.register(t)

    def register(self, t: Tool) -> None:
        """Add a tool, refusing unsafe effects and conflicting names."""
        t.check_safe()
        existing = self._tools.get(t.name)
        if existing is not None and existing is not t:
            raise ToolDefinitionError(f"two different tools are named {t.name!r}")
        self._tools[t.name] = t

    def get(self, name: str) -> Tool | None:
        """The tool of that name, if this worker has it."""
        return self._tools.get(name)

    def __iter__(self):  # noqa: D105
        return iter(self._tools.values())
