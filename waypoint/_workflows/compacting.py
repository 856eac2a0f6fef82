"""Compaction of a run's transcript: older turns folded into a recorded summary. Deterministic.

The summary is written by a model step of its own (`tN.compact`, `tN.compact.ctx`), reserved
like any call and parked like any on an outage. One a turn's step waits for (`.ctx`) may be
handed over parked (`OpenWait.compact`): the next segment parks it again on its ledger line,
writes the summary once `resume` comes, then calls that step. So may the summary written
between a turn and the continue-as-new (`tN.compact`): the next segment parks it again before
its first step (`Handover.first`), as if it had been written before the handover.
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
    from waypoint.protocol.handover import OpenWait
    from waypoint.protocol.vocabulary import CONTEXT_WINDOW_EXCEEDED, INVALID_REQUEST

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
            self,
            step_id: str,
            estimate: Callable[[], int],
            max_tokens: int,
            steers: bool = False,
            note: OpenWait | None = None,
        ) -> None: ...

        def _note(self, kind: str, step_id: str) -> OpenWait | None: ...

        def _request(
            self, record: StepRecord, system: str, tools: list[ToolSpec], messages: list[Message]
        ) -> ModelRequest: ...

        async def _execute(
            self, request: ModelRequest, record: StepRecord, retry: int, summary: str
        ) -> ModelResponse: ...

        async def _park(
            self, record: StepRecord, kind: str, message: str, handed: bool = False, then: str = ""
        ) -> None: ...

        def _account(self, record: StepRecord, response: ModelResponse, summary: str) -> None: ...

    def context_full(self) -> bool:
        """The last step read more than the agent's share of the model's context window."""
        settings = self.spec.settings
        return self.s.last_context_tokens >= settings.compact_at * settings.context_window

    def foldable(self, reason: str = "") -> int:
        """Where a compaction would cut the transcript now; 0: nothing to fold.

        `reason="ctx"`: the context window is filling up; if too few turns exist to keep the
        usual recent ones, keep only the last.
        """
        s, spec = self.s, self.spec
        keep_turns = s.history_budget().keep_recent_turns
        if len(s.messages) <= 2 * keep_turns + 1:
            if reason != "ctx" or len(s.messages) <= 3:
                return 0
            keep_turns = 1
        cut = tail_cut(s.messages, keep_turns, thinking=spec.settings.thinking != "off")
        return cut if cut > 1 else 0

    async def compact(
        self, reason: str = "", then: str = "", carried: OpenWait | None = None
    ) -> bool:
        """Fold all but the recent turns into a summary written by a recorded model step.

        Returns whether anything was folded. `then`: the turn's step that waits for it, named
        to a handover if the summary parks. `carried`: the summary step parked at a handover:
        parked again on its ledger line, not called before `resume`.
        """
        s = self.s
        cut = self.foldable(reason)
        if not cut:
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
            if carried is not None and carried.kind != "model_limit":  # recorded, then parked
                record = next(r for r in reversed(s.ledger) if r.step_id == carried.compact)
                invalid = INVALID_REQUEST if carried.kind == "request_invalid" else ""
                step_id, again = record.step_id, (invalid, s.last_model_error)
            else:
                at_limit = self.summary_note("model_limit", step_id, then, bool(then) or not reason)
                record, again = await self._record_summary(step_id, older, at_limit), None
            response = await self._summarise(record, older, then or not reason, then, again)
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

    def summary_note(self, kind: str, summary: str, then: str, handed: bool) -> OpenWait | None:
        """The wait of summary step `summary`, parked in `kind`, for a handover (`handed`).

        The turn's step `then` waits for it, or ('') it is written before a continue-as-new.
        """
        if not handed:
            return None
        if then:
            note = self._note(kind, then)
            return note and note.model_copy(update={"compact": summary})
        return OpenWait(kind=kind, compact=summary) if self._at is None else None  # type: ignore[arg-type]

    async def _record_summary(
        self, step_id: str, older: list[Message], note: OpenWait | None = None
    ) -> StepRecord:
        """Reserve the summary step (parked at a limit until it fits), then record it."""
        s, spec = self.s, self.spec
        chars = COMPACT_CHARS_PER_TOKEN * spec.settings.context_window
        digest = Message(role="user", content=[TextBlock(text=render_transcript(older, chars))])
        await self._reserve(
            step_id,
            lambda: budget.prompt_estimate(COMPACT_SYSTEM, [], [digest]),
            self._max_tokens(),
            note=note,  # parked at a limit: handed over as its failed call would be
        )
        inputs = {"model": spec.model, "transcript": s.transcript_hash}
        return self.steps.record(step_id, "model", self.steps.digest(inputs))

    async def _summarise(
        self,
        record: StepRecord,
        older: list[Message],
        handed: object,
        then: str,
        again: tuple[str, str] | None,
    ) -> ModelResponse:
        """The compaction's model call; an outage parks it like any model step's.

        The rendering is bounded by the context window (the activity id does not depend on it);
        a summary request the model still finds too long is made again over half as much.
        `handed`: its park may be handed over (a turn's step waits for it, `then`, or it is
        written before a continue-as-new). `again`: the park (its kind, its message) the step
        was handed over in: parked first.
        """
        s = self.s
        chars = COMPACT_CHARS_PER_TOKEN * self.spec.settings.context_window
        retry = 0 if again is None else 1
        while True:
            text = render_transcript(older, chars)
            if again is None:
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
            else:
                (kind, message), again = again, None
            await self._park(record, kind, message, handed=bool(handed), then=then)
