"""The naive agent-on-Temporal shape, for comparison: the whole transcript inline in every model
activity, no continue-as-new. Its history grows quadratically until Temporal stops it."""

from __future__ import annotations

from datetime import timedelta

from temporalio import activity, workflow


def document(n: int, size: int) -> str:
    """A deterministic tool output of `size` bytes."""
    line = f"record {n}: lorem ipsum dolor sit amet, consectetur adipiscing elit. "
    return (line * (size // len(line) + 1))[:size]


@activity.defn(name="naive.model")
async def naive_model(transcript: list[str]) -> str:
    return f"turn {len(transcript) // 2 + 1}"


@activity.defn(name="naive.tool")
async def naive_tool(n: int, size: int) -> str:
    return document(n, size)


@workflow.defn(name="NaiveAgent")
class NaiveAgent:
    def __init__(self) -> None:
        self.turn = 0

    @workflow.run
    async def run(self, turns: int, size: int) -> int:
        transcript: list[str] = ["task"]
        for k in range(1, turns + 1):
            self.turn = k
            answer = await workflow.execute_activity(
                naive_model, transcript, start_to_close_timeout=timedelta(seconds=30)
            )
            output = await workflow.execute_activity(
                naive_tool, args=[k, size], start_to_close_timeout=timedelta(seconds=30)
            )
            transcript += [answer, output]
        return self.turn

    @workflow.query
    def current_turn(self) -> int:
        return self.turn
