"""A fork starts from the run as it was at its fork point: reads, ledger lines and tools.

The source read a quote in turn 1, read it again in turn 2 (a refresh made then, named after
the turn-1 read), and replanned its tools in turn 2. A fork after turn 1 holds the turn-1 copy
of the quote, none of the turn-2 lines, and the tools before the replan; a fork after turn 2
holds what turn 2 left. Pure functions over the state the `fork_state` query returns.
"""

from __future__ import annotations

from waypoint._workflows.operator import fork_state
from waypoint.protocol import (
    AgentSpec,
    AgentState,
    Message,
    RunInput,
    StepRecord,
    TextBlock,
    ToolResultBlock,
    ToolSpec,
    ToolUseBlock,
)
from waypoint.protocol.reads import Observation
from waypoint.protocol.run import ReplacedPlan


def _tool(name: str, schema_hash: str) -> ToolSpec:
    return ToolSpec(
        name=name, description=name, input_schema={}, kind="read", schema_hash=schema_hash
    )


def _turn(n: int) -> list[Message]:
    call = ToolUseBlock(id=f"call{n}", name="quote", input={"item": "gold"})
    result = ToolResultBlock(tool_use_id=f"call{n}", content=f"gold: {100 + 20 * (n - 1)}")
    return [Message(role="assistant", content=[call]), Message(role="user", content=[result])]


def _line(step_id: str, kind: str = "tool", made_in: int | None = None) -> StepRecord:
    return StepRecord(
        step_id=step_id,
        kind=kind,
        input_hash="h",
        status="completed",
        made_in=made_in,  # type: ignore[arg-type]
    )


def _read(step_id: str, digest: str, turn: int, superseded: int = 0, use: str = "call1"):
    return Observation(
        step_id=step_id,
        tool="quote",
        arguments={"item": "gold"},
        tool_use_id=use,
        digest=digest,
        read_at="2026-12-05T00:00:00+00:00",
        turn=turn,
        superseded=superseded,
    )


def _source() -> AgentState:
    spec = AgentSpec(
        name="a", model="m", provider="scripted", system="s", tools=[_tool("quote", "v2")]
    )
    spec = spec.model_copy(update={"plan_version": 2})
    return AgentState(
        input=RunInput(agent="a", task="task"),
        spec=spec,
        messages=[Message(role="user", content=[TextBlock(text="task")]), *_turn(1), *_turn(2)],
        ledger=[
            _line("t1.model", "model"),
            _line("t1.tool.1.quote"),
            _line("t1.tool.1.quote.fresh1", made_in=2),  # a refresh made in turn 2
            _line("t2.replan.2", "spec"),
            _line("t2.model", "model"),
            _line("t2.tool.1.quote"),
            _line("t3.model", "model"),
        ],
        turn=3,
        observations=[_read("t2.tool.1.quote", "d120", turn=2, use="call2")],
        earlier_reads=[_read("t1.tool.1.quote", "d100", turn=1, superseded=2)],
        replaced_plans=[ReplacedPlan(turn=2, plan_version=1, tools=[_tool("quote", "v1")])],
    )


def test_a_fork_after_turn_1_holds_turn_1s_read_lines_and_tools() -> None:
    fork = fork_state(_source(), after_turn=1)
    assert [(o.step_id, o.digest) for o in fork.observations] == [("t1.tool.1.quote", "d100")]
    assert [r.step_id for r in fork.ledger] == ["t1.model", "t1.tool.1.quote"]
    assert fork.spec is not None and fork.spec.plan_version == 1
    assert [t.schema_hash for t in fork.spec.tools] == ["v1"]
    assert fork.earlier_reads == [] and fork.replaced_plans == []


def test_a_fork_after_turn_2_holds_what_turn_2_left() -> None:
    fork = fork_state(_source(), after_turn=2)
    assert [(o.step_id, o.digest) for o in fork.observations] == [("t2.tool.1.quote", "d120")]
    assert "t1.tool.1.quote.fresh1" in [r.step_id for r in fork.ledger]
    assert fork.spec is not None and [t.schema_hash for t in fork.spec.tools] == ["v2"]
    assert [o.superseded for o in fork.earlier_reads] == [2]
    assert all(o.read_at == "1970-01-01T00:00:00+00:00" for o in fork.observations)
