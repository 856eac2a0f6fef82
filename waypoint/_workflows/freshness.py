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

A held read is keyed by its tool and arguments: a newer read of the same key supersedes the
older copy, and only the newest is read again and compared (a poller reading one status each
turn holds one read, not one per turn). A read the transcript no longer holds is retired. A
replaced copy is kept (`AgentState.earlier_reads`) only while a fork could start before it was
replaced, so a fork acts on the reads as they were at its fork point. What counts for
"changed" is the whole result, or the part its tool's `fresh_key` picks (hashed on the worker).

Staleness compares times, so it is judged by recorded clocks. A read is dated by its own
activity as its body returns (`ToolOutcome.read_at`, recorded with the result, so a turn's local
reads each keep their own time); where no activity stamped it (a client's answer), by
`waypoint.clock`, an activity whose answer replays from its history event, asked as it ends.
Before a model step or an effect, `waypoint.clock` says what time it is now. Not by
`workflow.now()`, whose value at a given line can differ on replay (a workflow task that timed
out: torture seed 9430 replayed a refresh that had not run), nor by a local activity's clock of
its own (its marker met a patch marker out of order on replay, seed 9408). A crash never causes
a re-read. Deterministic code only.
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from waypoint.protocol import (
        FreshReads,
        ToolOutcome,
        ToolResultBlock,
        ToolSpec,
        ToolUseBlock,
        text_of,
    )
    from waypoint.protocol.reads import Observation

from waypoint._workflows import cancel, policy
from waypoint._workflows.steps import StepFailure, activity_id, failure

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from waypoint._workflows.steps import Steps
    from waypoint.protocol import AgentState, Resolution, ToolCall


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
        self.ended: dict[str, ToolOutcome] = {}
        """Outcomes of reads just run, by step id: their stamps date and key the read."""

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
        return _parsed(said) or FAR_FUTURE  # a worker's nonsense: read every one again

    def _tool(self, name: str) -> ToolSpec | None:
        return next((t for t in self.tools.steps.spec.tools if t.name == name), None)

    def _digest(self, content: Any, outcome: ToolOutcome | None = None) -> str:
        """Of what counts for "changed": the part its `fresh_key` picked, else the whole result."""
        basis = outcome.basis if outcome is not None else ""
        if len(basis) == 64 and all(c in "0123456789abcdef" for c in basis):
            return self.tools.steps.digest({"basis": basis})
        held = ToolResultBlock(tool_use_id="-", content=content).model_dump(mode="json")
        return self.tools.steps.digest({"observation": held["content"]})

    def ran(self, step_id: str, outcome: ToolOutcome) -> None:
        """Note a read's outcome as it comes back: its stamps date it and say what counts."""
        if outcome.read_at or outcome.basis:
            self.ended[step_id] = outcome

    async def _ended_at(self, outcome: ToolOutcome | None) -> str:
        """When a read ended: its activity's stamp, else a recorded clock asked now."""
        stamped = _parsed(outcome.read_at) if outcome is not None else None
        if stamped is not None:
            return stamped.isoformat()
        async with self.lock:  # one clock at a time, asked in the order the reads ended
            read_at = await self.clock_time()
        return "" if read_at == FAR_FUTURE else read_at.isoformat()

    async def observed(self, tool: ToolSpec, call: ToolCall, block: ToolResultBlock) -> None:
        """Keep a successful read of a `fresh_for` tool, dated as it ended."""
        outcome = self.ended.pop(call.step_id, None)
        if tool.fresh_for is None or block.is_error:
            return
        self._keep(
            Observation(
                step_id=call.step_id,
                tool=tool.name,
                arguments=call.arguments,
                tool_use_id=block.tool_use_id,
                digest=self._digest(block.content, outcome),
                read_at=await self._ended_at(outcome),
                turn=self.s.turn,
            )
        )

    def _keep(self, new: Observation, replaces: Observation | None = None) -> None:
        """Put a read in play; the copy of the same tool and arguments it replaces retires."""
        key = new.key()
        kept = []
        for o in self.s.observations:
            if o is replaces or o.key() == key:
                self._retire(o)
            else:
                kept.append(o)
        self.s.observations = sorted([*kept, new], key=_order)

    def _retire(self, o: Observation) -> None:
        """Keep a replaced copy while a fork could still start from a turn that held it."""
        s = self.s
        if o.turn < s.turn:  # replaced in the turn it was made in: no fork point held it
            s.earlier_reads = [*s.earlier_reads, o.model_copy(update={"superseded": s.turn})]
        forget_unforkable(s)

    def _drop(self, o: Observation) -> None:
        """Out of play once the model is told; a fork from before still holds it."""
        self.s.observations = [kept for kept in self.s.observations if kept is not o]
        self._retire(o)

    def _held(self) -> list[Observation]:
        """The reads in play the transcript still holds; the rest retire."""
        ids = {b.id for m in self.s.messages for b in m.content if isinstance(b, ToolUseBlock)}
        folded = self.s.compacted_turns  # a summary still says what those turns read
        held = [o for o in self.s.observations if o.tool_use_id in ids or _turn(o) <= folded]
        if len(held) != len(self.s.observations):
            for o in self.s.observations:
                if o not in held:
                    self._retire(o)
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
            self._drop(old)  # told once
            return f"{shown} was not read again: the approval policy in force would {route}"
        record = steps.record(step_id, "tool", input_hash, tool=tool.name)
        record.made_in = self.s.turn  # its id names the read's turn; a fork asks when it ran
        call = tools._call(step_id, tool, old.arguments, None)
        try:
            outcome = await tools._execute(tool, call, activity_id(record))
        except StepFailure as err:
            cancel.end_step(self.s, record, err)  # the run was cancelled: it ends, as a step's
            message = failure(err)[1]
            record.status, record.summary = "error", f"refresh failed: {message}"[:160]
            self._drop(old)  # said once: kept, it would refuse every later effect of the run
            self.publish()
            return f"{shown} could not be read again ({message}); read it again if it matters"
        self.ended.pop(step_id, None)
        digest = self._digest(outcome.content, outcome)
        same = digest == old.digest and not outcome.is_error
        text = " ".join(text_of(outcome.content).split())
        record.status = "error" if outcome.is_error else "completed"
        record.attempt = outcome.attempt
        record.summary = f"{UNCHANGED if same else CHANGED}: {text}"[:160]
        fresh = old.model_copy(
            update={
                "step_id": step_id,
                "digest": digest,
                "read_at": await self._ended_at(outcome),
                "refreshes": n,
                "turn": self.s.turn,
            }
        )
        self._keep(fresh, replaces=old)
        self.publish()
        # Whole, as the model saw the first read (the worker bounds a result's size already).
        return "" if same else f"{shown} read again now returns: {text_of(outcome.content)}"

    def publish(self) -> None:
        """Show the ledger's new lines (the status and the Web UI read them)."""
        self.tools.publish()

    async def before_effect(
        self, tool: ToolSpec, call: ToolCall, refuse: Callable[[str, bool], ToolResultBlock]
    ) -> ToolResultBlock | None:
        """Read stale reads again before an effect; its refusal if what it relied on changed.

        `refuse(text, is_error)` answers the call without running it. Any other call: None.
        """
        if tool.kind != "effect":
            return None
        self.untold += await self.refresh()
        if not (changed := self.untold):
            return None
        self.forget_remembered(call.step_id)
        return refuse(
            f"The call to {tool.name} was not run: what it relied on changed since it "
            f"was read. {'; '.join(changed)}. Decide again with these results; a new "
            "call is a new step and needs its own approval.",
            True,
        )

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


def forget_unforkable(s: AgentState) -> None:
    """Drop replaced copies no fork can start before any more: at most one a key and turn.

    A fork starts after a verbatim turn (past the compacted ones), so a copy replaced in a
    turn is needed only while the turn before it is still verbatim.
    """
    s.earlier_reads = [o for o in s.earlier_reads if o.superseded > s.compacted_turns + 1]


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


def _parsed(stamp: str) -> datetime | None:
    """A read's own stamp as a time; None where it is not one with a zone (a worker's nonsense)."""
    try:
        when = datetime.fromisoformat(stamp)
    except (TypeError, ValueError):
        return None
    return when if when.tzinfo is not None else None
