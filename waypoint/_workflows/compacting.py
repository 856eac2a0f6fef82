"""Compaction of a run's transcript: older turns folded into a recorded summary. Deterministic.

The summary is written by a model step of its own (`tN.compact`, `tN.compact.ctx`), reserved
like any call and parked like any on an outage (never handed over parked: `model_steps.py`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from waypoint.protocol import (
        AgentSpec,
        AgentState,
        Message,
        ModelRequest,
        ModelResponse,
        StepRecord,
        TextBlock,
        ToolSpec,
    )
    from waypoint.protocol.vocabulary import CONTEXT_WINDOW_EXCEEDED

from waypoint._workflows import budget, cancel, freshness, operator
from waypoint._workflows.compaction import (
    COMPACT_CHARS_PER_TOKEN,
    COMPACT_SYSTEM,
    MIN_COMPACT_CHARS,
    render_transcript,
    tail_cut,
)
from waypoint._workflows.steps import Steps, failure


class Compacting:
    """`ModelSteps`' compaction: what it needs of the model steps is declared here."""

    s: AgentState
    steps: Steps
    folding: int
    """While a compaction runs: the messages before this index are being summarised."""

    if TYPE_CHECKING:

        @property
        def spec(self) -> AgentSpec: ...  # noqa: D102

        def _max_tokens(self) -> int: ...

        async def _reserve(
            self, step_id: str, estimate: Callable[[], int], max_tokens: int, steers: bool = False
        ) -> None: ...

        def _request(
            self, record: StepRecord, system: str, tools: list[ToolSpec], messages: list[Message]
        ) -> ModelRequest: ...

        async def _execute(
            self, request: ModelRequest, record: StepRecord, retry: int, summary: str
        ) -> ModelResponse: ...

        async def _park(
            self, record: StepRecord, kind: str, message: str, handed: bool = False
        ) -> None: ...

        def _account(self, record: StepRecord, response: ModelResponse, summary: str) -> None: ...

    def context_full(self) -> bool:
        """The last step read more than the agent's share of the model's context window."""
        settings = self.spec.settings
        return self.s.last_context_tokens >= settings.compact_at * settings.context_window

    async def compact(self, reason: str = "") -> bool:
        """Fold all but the recent turns into a summary written by a recorded model step.

        `reason="ctx"`: the context window is filling up; if too few turns exist to keep the
        usual recent ones, keep only the last. Returns whether anything was folded.
        """
        s, spec = self.s, self.spec
        keep_turns = s.history_budget().keep_recent_turns
        if len(s.messages) <= 2 * keep_turns + 1:
            if reason != "ctx" or len(s.messages) <= 3:
                return False
            keep_turns = 1
        cut = tail_cut(s.messages, keep_turns, thinking=spec.settings.thinking != "off")
        if cut <= 1:
            return False
        older, recent = s.messages[:cut], s.messages[cut:]
        step_id = f"t{s.turn}.compact" + (f".{reason}" if reason else "")
        taken = sum(1 for r in s.ledger if r.step_id.startswith(step_id))
        if taken:
            step_id = f"{step_id}.{taken + 1}"
        # Corrections to the turns being folded are refused from here on (see `folding`):
        # the summary is written from `older` as it is now, also while a reservation waits.
        self.folding = cut
        try:
            chars = COMPACT_CHARS_PER_TOKEN * spec.settings.context_window
            digest = Message(role="user", content=[TextBlock(text=render_transcript(older, chars))])
            await self._reserve(
                step_id,
                lambda: budget.prompt_estimate(COMPACT_SYSTEM, [], [digest]),
                self._max_tokens(),
            )
            record = self.steps.record(
                step_id,
                "model",
                self.steps.digest({"model": spec.model, "transcript": s.transcript_hash}),
            )
            response = await self._summarise(record, older)
        finally:
            self.folding = 0
        summary = "\n".join(b.text for b in response.content if isinstance(b, TextBlock))
        folded = s.compacted_turns + len(operator.replies_in(older))
        shown = folded
        if s.messages[cut:] != recent:
            recent = s.messages[cut:]  # a correction arrived while the summary was written
        head = Message(
            role="user",
            content=[
                TextBlock(
                    text=f"{s.input.task}\n\n[Turns 1-{shown} so far, summarised by step "
                    f"{step_id}:]\n{summary}"
                )
            ],
        )
        s.messages = []
        s.transcript_hash = ""
        for message in [head, *recent]:
            self.steps.append(message)
        s.compacted_turns = folded
        freshness.forget_unforkable(s)  # what a fork could still start before: the rest goes
        s.stored_hash, s.stored_len = "", 0
        self._account(record, response, f"summarised turns 1-{shown}: {summary[:100]}")
        s.last_context_tokens = 0  # what the summary call read says nothing of the next prompt
        cancel.honour()
        return True

    async def _summarise(self, record: StepRecord, older: list[Message]) -> ModelResponse:
        """The compaction's model call; an outage parks it like any model step's.

        The rendering is bounded by the context window (the activity id does not depend on it);
        a summary request the model still finds too long is made again over half as much.
        """
        s = self.s
        chars = COMPACT_CHARS_PER_TOKEN * self.spec.settings.context_window
        retry = 0
        while True:
            text = render_transcript(older, chars)
            digest = Message(role="user", content=[TextBlock(text=text)])
            request = self._request(record, COMPACT_SYSTEM, [], [digest])
            request = request.model_copy(update={"purpose": "compact"})
            summary_line = f"t{s.turn} compact {len(older)} messages"
            try:
                return await self._execute(request, record, retry, summary_line)
            except ActivityError as err:
                cancel.end_step(s, record, err)
                kind, message = failure(err)
                retry += 1
                if kind == CONTEXT_WINDOW_EXCEEDED and len(text) // 2 >= MIN_COMPACT_CHARS:
                    chars = len(text) // 2
                    record.summary = f"summary request too long, halved: {message}"[:160]
                    continue
                await self._park(record, kind, message)
