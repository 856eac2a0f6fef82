"""`prepare_tool` and `run_tool`: validate arguments, reconcile ambiguous effects, run the tool."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError
from temporalio import activity
from temporalio.exceptions import ApplicationError

from waypoint._activities import threads
from waypoint._activities.heartbeat import heartbeating
from waypoint._activities.step_log import StepLog
from waypoint._agent import Agent
from waypoint._tools import Tool, ToolContext, render_result
from waypoint.errors import ContentError, EffectNotApplied, ToolReportedError
from waypoint.protocol import (
    RichBlock,
    SizeLimits,
    TextBlock,
    ToolCall,
    ToolOutcome,
    ToolPreparation,
)
from waypoint.protocol.bounds import INLINE_RESULT_BYTES, cut_result
from waypoint.protocol.vocabulary import EFFECT_NOT_APPLIED, NEEDS_RECONCILIATION, TOOL_CHANGED

T = TypeVar("T")

STOP_EARLY = 0.1
"""Part of its start-to-close timeout (at most `STOP_EARLY_MAX` seconds) by which an attempt
stops before the server times it out and schedules the next try."""
STOP_EARLY_MAX = 1.0
TOOL_TIMED_OUT = "ToolTimedOut"


def _validation_message(tool: str, err: ValidationError) -> str:
    problems = "; ".join(
        f"{'.'.join(str(p) for p in e['loc']) or '(input)'}: {e['msg']}" for e in err.errors()
    )
    return f"Invalid arguments for {tool}: {problems}. Fix them and call the tool again."


def _rendered(tool: Tool, value: object) -> str | list[RichBlock]:
    """The result as the model reads it; one that cannot be sent fails the step, unretried.

    The tool has run by now (an effect has happened), so the message says so.
    """
    try:
        return render_result(value)
    except (TypeError, ContentError) as err:
        raise ApplicationError(
            f"tool {tool.name!r} ran, but its result cannot be sent to the model: {err}",
            type="ToolResultNotSerializable",
            non_retryable=True,
        ) from err


def _cut(outcome: ToolOutcome, limit: int | None) -> ToolOutcome:
    """`outcome` with its text (or each text block) within `limit` bytes."""
    content = outcome.content
    if isinstance(content, str):
        cut: str | list[RichBlock] = cut_result(content, limit)
    else:
        cut = [
            b.model_copy(update={"text": cut_result(b.text, limit)})
            if isinstance(b, TextBlock)
            else b
            for b in content
        ]
    return outcome if cut == content else outcome.model_copy(update={"content": cut})


class ToolActivities:
    """Runs the tools of the worker's agents."""

    def __init__(
        self, agents: Mapping[str, Agent], step_log: Path | None = None, offloaded: bool = False
    ) -> None:
        self.agents = dict(agents)
        self.step_log = StepLog(step_log)
        self.offloaded = offloaded
        """Large payloads go to a payload store: a result need not fit the payload limit."""

    def _tool(self, call: ToolCall) -> Tool:
        agent = self.agents.get(call.agent)
        tool = agent.tool(call.tool) if agent else None
        if tool is None:
            raise ApplicationError(
                f"this worker has no tool {call.tool!r} for agent {call.agent!r}; "
                "deploy a worker that has it, or let the agent's on_change policy decide",
                type=TOOL_CHANGED,
                non_retryable=True,
            )
        if tool.spec().schema_hash != call.schema_hash:
            raise ApplicationError(
                f"tool {call.tool!r} changed since this run started (its schema or description "
                "differs from the run's snapshot)",
                type=TOOL_CHANGED,
                non_retryable=True,
            )
        return tool

    async def _current(self, call: ToolCall) -> Tool:
        """The tool, after re-listing its MCP server if the run's snapshot differs (MCP only)."""
        agent = self.agents.get(call.agent)
        if agent is not None:  # listing a slow server must not miss the heartbeat timeout
            await heartbeating(agent.refresh_tool(call.tool, call.schema_hash), call.tool)
        return self._tool(call)

    @staticmethod
    def _context(call: ToolCall) -> ToolContext:
        return ToolContext(
            step_id=call.step_id,
            attempt=activity.info().attempt if activity.in_activity() else 1,
            effect_key=call.effect_key,
            workflow_id=call.workflow_id,
            run_id=call.run_id,
        )

    @activity.defn(name="waypoint.prepare_tool")
    async def prepare_tool(self, call: ToolCall) -> ToolPreparation:
        """Validate the arguments and decide whether a person must approve them."""
        tool = await self._current(call)
        try:
            args = tool.args_model.model_validate(call.arguments)
        except ValidationError as err:
            return ToolPreparation(valid=False, error=_validation_message(call.tool, err))
        rule = tool.options.requires_approval
        needs = bool(rule(args)) if callable(rule) else bool(rule)
        return ToolPreparation(valid=True, needs_approval=needs, arguments=tool.coerced(args))

    @activity.defn(name="waypoint.run_tool")
    async def run_tool(self, call: ToolCall) -> ToolOutcome:
        """Run the tool once; on a retry of an effect, ask downstream first whether it happened.

        Its result is cut to the agent's `max_result_bytes` before Temporal records it: one past
        the payload limit would fail the step on every try, after the effect had happened.
        """
        outcome = await self._run(call)
        agent = self.agents.get(call.agent)
        limit = ((agent.size_limits if agent else None) or SizeLimits()).max_result_bytes
        return _cut(outcome, limit or (None if self.offloaded else INLINE_RESULT_BYTES))

    async def _run(self, call: ToolCall) -> ToolOutcome:
        ctx = self._context(call)
        # An earlier try (or the tries an operator saw run out) may have reached downstream.
        unsure = call.effect_key is not None and (
            ctx.attempt > 1 or call.reconcile_first or call.reconcile_only
        )
        try:
            tool = await self._current(call)
        except ApplicationError as err:
            if err.type != TOOL_CHANGED or not unsure:
                raise
            return await self._changed(call, ctx, err)
        self.step_log.write(call.step_id, ctx.attempt)
        try:
            args: BaseModel = tool.args_model.model_validate(call.arguments)
        except ValidationError as err:
            return ToolOutcome(
                content=_validation_message(call.tool, err), is_error=True, attempt=ctx.attempt
            )
        if tool.kind != "effect" or call.effect_key is None:
            return await self._attempt(tool, args, ctx, call, unsure)
        async with threads.settled(tool.name, ctx.step_id, call.effect_key):
            return await self._attempt(tool, args, ctx, call, unsure)

    async def _attempt(
        self, tool: Tool, args: BaseModel, ctx: ToolContext, call: ToolCall, unsure: bool
    ) -> ToolOutcome:
        """One try: the last lookup, or a lookup first where one is due, then the tool."""
        if call.reconcile_only:
            return await self._last_lookup(tool, args, ctx)
        if tool.kind == "effect" and (ctx.attempt > 1 or call.reconcile_first):
            found = await self._reconcile(tool, args, ctx)
            if found is not None:
                return ToolOutcome(
                    content=_rendered(tool, found), attempt=ctx.attempt, reconciled=True
                )
            unsure = tool.options.reconcile is None  # a lookup said it did not happen
        try:
            work = heartbeating(tool(args, ctx), tool.name)
            if tool.is_async or call.timeout is not None:
                work = _before_deadline(work, tool.name, ctx, call.timeout)
            result = await work
        except ApplicationError as err:
            if err.type == TOOL_CHANGED and unsure:  # an MCP server changed under the worker
                raise _unconfirmed(call, err.message, "it has no reconcile to ask") from err
            raise
        except ToolReportedError as err:
            return ToolOutcome(content=str(err), is_error=True, attempt=ctx.attempt)
        except EffectNotApplied as err:
            raise ApplicationError(str(err), type=EFFECT_NOT_APPLIED, non_retryable=True) from err
        except Exception as err:
            raise ApplicationError(
                f"{type(err).__name__}: {err}",
                type=type(err).__name__,
                non_retryable=isinstance(err, ContentError),  # the same bytes fail again
            ) from err
        outcome = ToolOutcome(content=_rendered(tool, result), attempt=ctx.attempt)
        if tool.options.fresh_for is None and not call.fresh:
            return outcome
        # Dated as the read ends, in every durability mode: a turn's local reads are recorded
        # together when the turn ends, and would all look as old as the last one.
        stamp = {"read_at": datetime.now(UTC).isoformat(), "basis": tool.fresh_basis(result)}
        return outcome.model_copy(update=stamp)

    async def _changed(
        self, call: ToolCall, ctx: ToolContext, changed: ApplicationError
    ) -> ToolOutcome:
        """The tool changed after a try may have reached downstream: look it up, never "not run".

        This worker's reconcile for the tool asks by the effect key; only a lookup that confirms
        nothing happened hands the change to the agent's `on_change` policy.
        """
        agent = self.agents.get(call.agent)
        tool = agent.tool(call.tool) if agent else None
        if tool is None or tool.options.reconcile is None:
            raise _unconfirmed(call, changed.message, "this worker has no reconcile for it")
        try:
            args = tool.args_model.model_validate(call.arguments)
        except ValidationError as err:
            raise _unconfirmed(
                call, changed.message, "its arguments do not fit this worker's reconcile"
            ) from err
        found = await self._reconcile(tool, args, ctx)
        if found is None:
            raise ApplicationError(
                f"{changed.message}; its downstream system confirms no earlier try happened "
                f"(looked up by effect key {ctx.effect_key})",
                type=TOOL_CHANGED,
                non_retryable=True,
            )
        return ToolOutcome(content=_rendered(tool, found), attempt=ctx.attempt, reconciled=True)

    async def _last_lookup(self, tool: Tool, args: BaseModel, ctx: ToolContext) -> ToolOutcome:
        """After an effect's tries ran out: did any of them happen? Never run it again here."""
        if tool.options.reconcile is None:
            raise ApplicationError(
                f"{tool.name} failed on every try and, being idempotent without a reconcile "
                f"function, cannot say whether it happened (effect key {ctx.effect_key}). "
                "Resolve with --retry to run it again under the same key",
                type=NEEDS_RECONCILIATION,
                non_retryable=True,
            )
        found = await self._reconcile(tool, args, ctx)
        if found is None:
            return ToolOutcome(
                content=f"{tool.name} failed on every try; its downstream system confirms it "
                "did not happen (looked up by its effect key).",
                is_error=True,
                attempt=ctx.attempt,
            )
        return ToolOutcome(content=_rendered(tool, found), attempt=ctx.attempt, reconciled=True)

    @staticmethod
    async def _reconcile(tool: Tool, args: BaseModel, ctx: ToolContext) -> object | None:
        """Ask downstream by the effect key; if it cannot tell, the run parks for an operator."""
        if tool.options.reconcile is None:
            return None  # idempotent: running again with the same key is the reconciliation
        try:
            lookup = tool.options.reconcile
            asked = (
                lookup(args, ctx)
                if inspect.iscoroutinefunction(lookup)
                else asyncio.to_thread(lookup, args, ctx)  # a plain def, in a thread like a tool
            )
            found = await heartbeating(asked, tool.name)
        except Exception as err:
            raise ApplicationError(
                f"cannot tell whether {tool.name} happened (effect key {ctx.effect_key}): "
                f"reconcile raised {type(err).__name__}: {err}",
                type=NEEDS_RECONCILIATION,
                non_retryable=True,
            ) from err
        if found is not None:
            activity.logger.info("%s: effect %s already happened", ctx.step_id, ctx.effect_key)
        return found


async def _before_deadline(
    work: Awaitable[T], tool: str, ctx: ToolContext, timeout: timedelta | None
) -> T:
    """Stop a tool at its timeout, before the server schedules the next try.

    An effect's `timeout` comes with the call and is kept here, on the worker: the server's
    own limit for its attempt is longer (`StepOptions.effect_overrun`), so a thread the tool
    started, which cannot be stopped, is outwaited before the next try looks the effect up
    (`threads.settled`). Other tools stop just before the server's limit, which schedules the
    next try whether or not this one still runs; the worker would hear of it only seconds later.
    A plain `def` tool's thread runs to its end either way.
    """
    info = activity.info() if activity.in_activity() else None
    if timeout is not None:
        limit, early = timeout.total_seconds(), 0.0
    elif info is not None and info.start_to_close_timeout:
        limit = info.start_to_close_timeout.total_seconds()
        early = min(STOP_EARLY * limit, STOP_EARLY_MAX)
    else:
        return await work
    started = info.started_time if info is not None else datetime.now(UTC)
    elapsed = max(0.0, (datetime.now(UTC) - started).total_seconds())
    loop = asyncio.get_running_loop()
    deadline = asyncio.timeout_at(loop.time() + max(0.0, limit - elapsed - early))
    try:
        async with deadline:
            return await work
    except TimeoutError:
        if not deadline.expired():
            raise  # the tool's own TimeoutError
    raise ApplicationError(
        f"{tool} was stopped as its {limit:g}s timeout ran out ({ctx.step_id}); the next try "
        "looks the effect up first (an effect) or runs again. Give the tool a longer `timeout` "
        "if it needs one",
        type=TOOL_TIMED_OUT,
    )


def _unconfirmed(call: ToolCall, changed: str, why: str) -> ApplicationError:
    """Park the step: the tool changed and nobody here can tell whether an earlier try happened."""
    return ApplicationError(
        f"{changed}, after an earlier try of {call.tool} may have reached downstream, and {why} "
        f"(effect key {call.effect_key}). Deploy a worker with its reconcile and resolve with "
        "--retry, or check downstream by the key and resolve with its result (or abort)",
        type=NEEDS_RECONCILIATION,
        non_retryable=True,
    )
