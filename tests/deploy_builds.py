"""Workflow code of other builds, for `deploy check` (a module the sandbox imports cheaply)."""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow

from waypoint._workflows import AgentWorkflow
from waypoint.protocol import RunInput, RunResult


@workflow.defn(name="AgentWorkflow")
class RefactoredWorkflow(AgentWorkflow):
    """A new build whose workflow code moved things around but decides the same."""

    @workflow.run
    async def run(self, input: RunInput) -> RunResult:
        return await self._same(input)

    async def _same(self, input: RunInput) -> RunResult:
        return await super().run(input)


@workflow.defn(name="AgentWorkflow")
class TimerFirstWorkflow(AgentWorkflow):
    """A new build that waits before its first step: the recorded first command differs."""

    @workflow.run
    async def run(self, input: RunInput) -> RunResult:
        await workflow.sleep(timedelta(seconds=1))
        return await super().run(input)
