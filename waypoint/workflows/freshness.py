"""Fresh observations: a read with `fresh_for` is read again before anything acts on it stale.

The first essay's rule: replay the stored result by default; re-read only when a freshness
rule says the observation has expired. Each successful read of a tool with `fresh_for` is kept
(`AgentState.observations`) with when it was read, by workflow time, and a digest of what it
returned. Before an effect runs, and before a model step, every kept read that the transcript
still holds and that is older than its tool's `fresh_for` is read again as a new step
(`{step}.fresh{n}`; the old result stays in the ledger). If every re-read returns what was
recorded, the effect runs as approved. If one differs (or cannot be read), the effect does not
run: its result tells the model what changed, and a call it makes anew is a new step, with its
own approval. Before a model step, what changed goes to the model as a note.

Staleness compares times, so it is judged by a recorded clock: `waypoint.clock`, an activity
whose answer replays from its history event, asked before a model step or an effect while the
run holds such reads. A read is dated by the first clock asked after it (seconds after it, as
the loop asks before its next model step). Not by `workflow.now()`, whose value at a given line
can differ on replay (a workflow task that timed out: torture seed 9430 replayed a refresh that
had not run), nor by a local activity's clock (its marker met a patch marker out of order on
replay, seed 9408). A crash never causes a re-read. Deterministic code only.
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from waypoint.protocol import FreshReads, ToolResultBlock, ToolSpec, ToolUseBlock, text_of
    from waypoint.protocol.run import Observation

from waypoint.workflows import cancel, policy
from waypoint.workflows.steps import StepFailure, activity_id, failure

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from waypoint.protocol import AgentState, Resolution, ToolCall, ToolOutcome
    from waypoint.workflows.steps import Steps


class ToolRunner(Protocol):
    """What freshness needs of `ToolSteps` (which builds it): run a read again, show it."""

    s: AgentState
    steps: Steps

    def publish(self) -> None: ...  # noqa: D102

    def _call(  # noqa: D102
        self, step_id: str, tool: ToolSpec, arguments: dict[str, Any], effect_key: str | None
    ) -> ToolCall: ...

    async def _execute(self, tool: ToolSpec, call: ToolCall, act_id: str) -> ToolOutcome: ...  # noqa: D102


CLOCK_TIMEOUT = timedelta(seconds=10)
UNCHANGED, CHANGED = "refreshed, unchanged", "refreshed, CHANGED"
"""How a refresh's ledger line starts (`status` counts the changed ones)."""
FAR_FUTURE = datetime.max.replace(tzinfo=UTC)
"""What a clock answer that is not a time counts as: every held read is stale, read again."""


class Freshness:
    """Keeps the run's `fresh_for` reads, and reads them again when they go stale."""

    def __init__(self, tools: ToolRunner) -> None:
        self.tools = tools
        self.s = tools.s
        self.lock = asyncio.Lock()
        """Parallel effects of one reply refresh once: the second finds the reads fresh."""
        self.untold: list[str] = []
        """Changes found since the model last read: every effect is refused until it has (a
        second effect of the reply whose first found a change runs on nothing fresher)."""

    async def clock_time(self) -> datetime:
        """The time, as the recorded clock says (see the module's docstring)."""
        said = await workflow.execute_activity(
            "waypoint.clock",
            result_type=str,
            task_queue=self.tools.steps.agent_queue(),
            start_to_close_timeout=CLOCK_TIMEOUT,
            heartbeat_timeout=self.s.input.options.tool_heartbeat_timeout,
            summary="clock (fresh_for)",
        )
        try:
            said_at = datetime.fromisoformat(said)
        except (TypeError, ValueError):
            said_at = None
        if said_at is None or said_at.tzinfo is None:  # a worker's nonsense: read every one again
            return FAR_FUTURE
        return said_at

    def _tool(self, name: str) -> ToolSpec | None:
        return next((t for t in self.tools.steps.spec.tools if t.name == name), None)

    def _digest(self, content: Any) -> str:
        """Of a result's content, as the transcript holds it."""
        held = ToolResultBlock(tool_use_id="-", content=content).model_dump(mode="json")
        return self.tools.steps.digest({"observation": held["content"]})

    async def observed(self, tool: ToolSpec, call: ToolCall, block: ToolResultBlock) -> None:
        """Keep a successful read of a `fresh_for` tool, dated by a clock asked as it ends."""
        if tool.fresh_for is None or block.is_error:
            return
        async with self.lock:  # one clock at a time, asked in the order the reads ended
            read_at = await self.clock_time()
        self.s.observations.append(
            Observation(
                step_id=call.step_id,
                tool=tool.name,
                arguments=call.arguments,
                tool_use_id=block.tool_use_id,
                digest=self._digest(block.content),
                read_at="" if read_at == FAR_FUTURE else read_at.isoformat(),
            )
        )

    def _held(self) -> list[Observation]:
        """The kept reads the transcript still holds, as calls or in a compacted turn's summary."""
        ids = {b.id for m in self.s.messages for b in m.content if isinstance(b, ToolUseBlock)}
        folded = self.s.compacted_turns  # a summary still says what those turns read
        held = sorted(
            (o for o in self.s.observations if o.tool_use_id in ids or _turn(o) <= folded),
            key=_order,
        )
        if held != self.s.observations:  # parallel reads keep theirs in any order: sort them
            self.s.observations = held
        return held

    async def stale(self) -> list[Observation]:
        """Kept reads older than their tool's `fresh_for`."""
        held = self._held()
        if not held:
            return []
        now = await self.clock_time()
        if now == FAR_FUTURE:
            return held  # no time to judge by: read every one again, date none by it
        if any(not o.read_at for o in held):  # reads since the last clock: read about now
            dated = [o.model_copy(update={"read_at": o.read_at or now.isoformat()}) for o in held]
            self.s.observations = held = dated
        found = []
        for o in held:
            tool = self._tool(o.tool)
            if tool is None or tool.fresh_for is None:
                continue
            if now - datetime.fromisoformat(o.read_at) > tool.fresh_for:
                found.append(o)
        return found

    async def refresh(self) -> list[str]:
        """Read every stale observation again; what changed, one line each ('' none)."""
        if not self.s.observations:
            return []
        async with self.lock:
            changed = []
            for old in await self.stale():
                line = await self._read_again(old)
                if line:
                    changed.append(line)
            return changed

    async def _read_again(self, old: Observation) -> str:
        tools, steps = self.tools, self.tools.steps
        tool = self._tool(old.tool)
        assert tool is not None  # stale() kept only tools the spec has
        n = old.refreshes + 1
        step_id = f"{_first(old.step_id)}.fresh{n}"
        input_hash = steps.digest(
            {"tool": tool.name, "schema": tool.schema_hash, "arguments": old.arguments, "n": n}
        )
        shown = f"{tool.name}({json.dumps(old.arguments, sort_keys=True)})"
        route = policy.route(tool, policy.verdict(self.s, tool, old.arguments))
        if route in ("ask", "deny"):  # the same funnel as the read: never past a person
            self.s.observations = [o for o in self.s.observations if o is not old]  # told once
            return f"{shown} was not read again: the approval policy in force would {route}"
        record = steps.record(step_id, "tool", input_hash, tool=tool.name)
        call = tools._call(step_id, tool, old.arguments, None)
        try:
            outcome = await tools._execute(tool, call, activity_id(record))
        except StepFailure as err:
            cancel.end_step(self.s, record, err)  # the run was cancelled: it ends, as a step's
            message = failure(err)[1]
            record.status, record.summary = "error", f"refresh failed: {message}"[:160]
            # Said once, then dropped: kept, it would refuse every later effect of the run.
            self.s.observations = [o for o in self.s.observations if o is not old]
            self.publish()
            return f"{shown} could not be read again ({message}); read it again if it matters"
        digest = self._digest(outcome.content)
        same = digest == old.digest and not outcome.is_error
        text = " ".join(text_of(outcome.content).split())
        record.status = "error" if outcome.is_error else "completed"
        record.attempt = outcome.attempt
        record.summary = f"{UNCHANGED if same else CHANGED}: {text}"[:160]
        read_at = await self.clock_time()
        fresh = old.model_copy(
            update={
                "step_id": step_id,
                "digest": digest,
                "read_at": "" if read_at == FAR_FUTURE else read_at.isoformat(),
                "refreshes": n,
            }
        )
        self.s.observations = [fresh if o is old else o for o in self.s.observations]
        self.publish()
        # Whole, as the model saw the first read (the worker bounds a result's size already).
        return "" if same else f"{shown} read again now returns: {text_of(outcome.content)}"

    def publish(self) -> None:
        """Show the ledger's new lines (the status and the Web UI read them)."""
        self.tools.publish()

    async def guarded(
        self,
        tool: ToolSpec,
        call: ToolCall,
        run: Callable[[], Awaitable[ToolResultBlock]],
        refuse: Callable[[str, bool], ToolResultBlock],
    ) -> ToolResultBlock:
        """Run a step: an effect only on fresh reads; a `fresh_for` read is kept.

        `refuse(text, is_error)` answers the call without running it.
        """
        if tool.kind == "effect":
            self.untold += await self.refresh()
            if changed := self.untold:
                self.forget_remembered(call.step_id)
                return refuse(
                    f"The call to {tool.name} was not run: what it relied on changed since it "
                    f"was read. {'; '.join(changed)}. Decide again with these results; a new "
                    "call is a new step and needs its own approval.",
                    True,
                )
        block = await run()
        await self.observed(tool, call, block)
        return block

    def forget_remembered(self, step_id: str) -> None:
        """An approval remembered on a refused step covers nothing: the model decides anew."""
        policy_state = self.s.policy
        kept = [r for r in policy_state.remembered if not r.by.endswith(f" on {step_id}")]
        if len(kept) != len(policy_state.remembered):
            self.s.policy = policy_state.model_copy(update={"remembered": kept})

    async def before_model(self) -> bool:
        """Refresh stale reads before a model step; what changed goes to the model as a note.

        Also asked when a model step comes back from a park (an outage, a budget): True when
        a note now waits, so the step is asked again with it.
        """
        self.untold = []  # the last reply's refusals, saying what changed, are in its results
        changed = await self.refresh()
        cancel.honour()  # cancelled while refreshing: no model call after it
        if changed:
            self.s.notes.append(
                "Read again because the earlier results had gone stale: " + "; ".join(changed)
            )
        return bool(changed)

    async def before_retry(
        self, tool: ToolSpec, decision: Resolution, ask: Callable[[str], Awaitable[Resolution]]
    ) -> Resolution:
        """An operator's `retry` of an unconfirmed effect runs it on fresh reads, or asks again.

        The effect may have happened, so it is never refused: when a read changed while it was
        parked, it parks again saying what changed, and the model hears it at its next step.
        """
        while decision.action == "retry" and (changed := await self.refresh()):
            self.untold += changed  # the reply's other effects do not run on the old reads
            said = "; ".join(changed)
            self.s.notes.append(f"Read again before {tool.name} was retried: {said}")
            decision = await ask(
                f"what {tool.name} relied on changed while it waited: {said}. Resolve it again: "
                "`retry` runs it on these results, `result` or `abort` settles it"
            )
        return decision


def at_a_glance(s: AgentState, last: int = 160) -> FreshReads | None:
    """The run's `fresh_for` reads and refreshes (status, memo, Web UI); None if it has neither."""
    if not s.observations and not (s.spec and any(t.fresh_for for t in s.spec.tools)):
        return None  # the common case, asked every step: no scan of the ledger
    refreshes = [r for r in s.ledger if ".fresh" in r.step_id and is_refresh(r.step_id)]
    if not s.observations and not refreshes:
        return None
    latest = refreshes[-1] if refreshes else None
    line = f"{latest.step_id}: {latest.summary}" if latest else ""
    return FreshReads(
        held=len(s.observations),
        refreshed=len(refreshes),
        changed=sum(r.summary.startswith(CHANGED) for r in refreshes),
        last=line if len(line) <= last else line[: last - 1] + "…",
    )


def is_refresh(step_id: str) -> bool:
    """Whether a ledger line is a refresh (`t3.tool.1.NAME.fresh2`), not the read itself."""
    parts = step_id.split(".")
    return len(parts) == 5 and parts[1] == "tool" and parts[4].startswith("fresh")


def _first(step_id: str) -> str:
    """The read's own step id (`t3.tool.1.NAME`; a tool's name holds no dot), without `.freshN`."""
    return ".".join(step_id.split(".")[:4])


def _turn(o: Observation) -> int:
    """The turn the read was made in (`t3.tool.1.x` is turn 3)."""
    head = o.step_id.split(".", 1)[0]
    return int(head[1:]) if head[1:].isdigit() else 0


def _order(o: Observation) -> tuple[str, str]:
    return (_first(o.step_id), o.tool_use_id)
