"""`durability="turn"`: a reply's pure and read calls as local activities, saved together.

When the run's durability is `turn` (`Agent.durability`, or the run's own) and every call of a
reply is a known, valid `pure` or `read` tool that runs as an activity and that nothing gates
(no approval rule, no policy in force, nothing remembered), the calls run as local activities
in the workflow task that got the reply: no activity task goes through the server, and their
results are saved together when that task completes. A crash before then runs them again: they
are reads, never an effect or a model call. A reply holding anything else runs step by step.

Local activities resolve in the order they finish when live, and may resolve in another order
on replay. So nothing here acts on a result until all of them are in, and then in call order:
what the task does next does not depend on which read was quicker. A run whose `pure` tools
were local activities, each acting on its own result as it came, once failed replay after a
Temporal server SIGKILL ("Missing associated machine for LocalActivity(3)", torture seed 1806);
`tests/test_durability.py` kills the server mid-turn and replays.

A read whose tool changed under `on_change="refuse"` parks the run; the reply's other calls are
settled first and the parked ones wait together, each through `Handover.call`, so a run flooded
while parked hands over like any other (`handover.py`). Its next segment goes on with that reply
step by step: the settled calls answer from the handover, the parked ones park again, and
nothing is read twice. Deterministic code only.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Protocol

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from waypoint.protocol import (
        StepRecord,
        ToolOutcome,
        ToolResultBlock,
        ToolSpec,
        ToolUseBlock,
    )
    from waypoint.protocol.vocabulary import TOOL_CHANGED

from waypoint._workflows import policy
from waypoint._workflows.steps import StepFailure, activity_id, failure

if TYPE_CHECKING:
    from waypoint._workflows.freshness import Freshness
    from waypoint._workflows.gates import Gates
    from waypoint._workflows.steps import Finish, Steps
    from waypoint.protocol import AgentState, ToolCall

LOCAL_KINDS = ("pure", "read")


class TurnTools(Protocol):
    """What a local turn needs of `ToolSteps` (which builds it)."""

    s: AgentState
    steps: Steps
    freshness: Freshness
    gates: Gates

    def _record(self, index: int, call: ToolUseBlock) -> tuple[StepRecord, ToolSpec | None]: ...  # noqa: D102

    def finisher(  # noqa: D102
        self, record: StepRecord, call: ToolUseBlock
    ) -> Finish: ...

    def _call(  # noqa: D102
        self, step_id: str, tool: ToolSpec, arguments: dict[str, Any], effect_key: str | None
    ) -> ToolCall: ...

    async def _run(  # noqa: D102
        self, tool: ToolSpec, call: ToolCall, record: StepRecord, finish: Finish, changed: int = 0
    ) -> ToolResultBlock: ...

    async def changed_tool(  # noqa: D102
        self, record: StepRecord, message: str, finish: Finish, err: Any
    ) -> ToolResultBlock | None: ...

    def publish(self) -> None: ...  # noqa: D102


class LocalTurn:
    """Runs a reply's ungated pure and read calls as local activities, when the run says so."""

    def __init__(self, tools: TurnTools) -> None:
        self.tools = tools
        self.s = tools.s

    def fits(self, calls: list[ToolUseBlock]) -> bool:
        """Whether this reply runs as one local turn."""
        spec = self.tools.steps.spec
        if (self.s.input.durability or spec.durability) != "turn" or not calls:
            return False
        if policy.current(self.s) is not None or self.s.policy.remembered:
            return False  # a policy or a remembered approval judges calls: step by step
        if self.tools.gates.handover.resumed_turn() is not None:
            return False  # handed over parked (a changed read): it goes on step by step
        cap = spec.settings.max_parallel_tools
        if cap is not None and cap < len(calls):
            return False  # the agent caps how many run at once: step by step, within it
        by_name = {t.name: t for t in spec.tools}
        return all(
            not c.invalid
            and (t := by_name.get(c.name)) is not None
            and t.kind in LOCAL_KINDS
            and t.runs_as == "activity"
            and t.approval == "never"
            for c in calls
        )

    async def run(self, numbered: list[tuple[int, ToolUseBlock]]) -> list[ToolResultBlock]:
        """Run every call at once; act on the results when all are in, in call order."""
        made = []
        for index, use in numbered:
            record, tool = self.tools._record(index, use)
            assert tool is not None  # fits() checked every name
            made.append((record, tool, self.tools._call(record.step_id, tool, use.input, None)))
        self.tools.publish()
        outcomes = await asyncio.gather(
            *(self._local(tool, call, activity_id(record)) for record, tool, call in made),
            return_exceptions=True,
        )
        settle = self.tools.gates.handover.call  # a handover carries what each answered
        blocks: dict[int, ToolResultBlock] = {}
        parks = []
        for (record, tool, call), (index, use), outcome in zip(
            made, numbered, outcomes, strict=True
        ):
            settling = settle(index, self._settle(record, tool, call, use, outcome))
            if isinstance(outcome, StepFailure) and failure(outcome)[0] == TOOL_CHANGED:
                parks.append((index, settling))  # parks: after the others, all together
            else:
                blocks[index] = await settling
        parked = await asyncio.gather(*(p for _, p in parks))
        blocks.update((index, block) for (index, _), block in zip(parks, parked, strict=True))
        return [blocks[index] for index, _ in numbered]

    async def _settle(
        self,
        record: StepRecord,
        tool: ToolSpec,
        call: ToolCall,
        use: ToolUseBlock,
        outcome: ToolOutcome | BaseException,
    ) -> ToolResultBlock:
        finish = self.tools.finisher(record, use)
        if isinstance(outcome, ToolOutcome):
            record.attempt = outcome.attempt
            block = finish(outcome.content, outcome.is_error)
            self.tools.freshness.ran(call.step_id, outcome)  # dated as it ended, not as all did
            await self.tools.freshness.observed(tool, call, block)
            return block
        if not isinstance(outcome, StepFailure):
            raise outcome  # a cancel, or a bug: as a step would
        changed = 0
        while True:
            kind, message = failure(outcome)
            if kind != TOOL_CHANGED:
                return finish(f"Tool {use.name} failed: {message}", True)
            answered = await self.tools.changed_tool(record, message, finish, outcome)
            if answered is not None:
                return answered
            changed += 1  # rolled back, says the operator: run it again, as a step
            try:
                return await self.tools._run(tool, call, record, finish, changed)
            except StepFailure as err:
                outcome = err

    async def _local(self, tool: ToolSpec, call: ToolCall, act_id: str) -> ToolOutcome:
        opts = self.s.input.options
        return await workflow.execute_local_activity(
            "waypoint.run_tool",
            call,
            result_type=ToolOutcome,
            activity_id=act_id,
            start_to_close_timeout=tool.timeout or opts.tool_timeout,
            retry_policy=self.tools.steps.retry_policy(tool.max_attempts or opts.tool_max_attempts),
            summary=f"t{self.s.turn} tool {tool.name} (local)",
        )
