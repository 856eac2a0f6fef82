"""Model steps: one recorded call each, plus every re-ask a stop reason calls for. Deterministic.

A turn starts with the model step `tN.model`; what the API says next is never masked:
- `max_tokens`: the reply is not kept and none of its tool calls run. `tN.model.full` asks again
  with the model's whole output budget; if that is cut off too, a text answer is continued
  (`tN.model.cont1`, ...) and each tool call gets an error result so the model can split the work.
- `pause_turn`: the paused reply is kept and the turn continues (`tN.model.cont1`, ...).
- `model_context_window_exceeded`, or a "prompt is too long" error: the transcript is compacted
  (a recorded step) and the call made again (`tN.model.c1`).
- An outage (retries used up, or 401/402/403/404): the run parks in `model_unavailable` until
  `resume`; the same step is retried, and every finished step is kept.
- Any other 400 or 422 (`InvalidRequest`): the request itself is wrong and sending it again
  fails the same way, so the run parks in `request_invalid` with the API's message; `resume`
  sends it again once the cause is fixed (a worker deploy, a `correct`ed result).
A turn's step parked so (or held by a pause before its call, or parked after an answer that
fills the context window with nothing left to compact) may be handed to the next history
segment (`handover.py`), which takes the turn up at that step, its phase carried: the steps
before it are not asked again, and it is not called before `resume` (or `unpause`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from waypoint.protocol import (
        AgentSpec,
        Limits,
        Message,
        ModelRequest,
        ModelResponse,
        StepRecord,
        ToolSpec,
        ToolUseBlock,
    )
    from waypoint.protocol.handover import OpenWait
    from waypoint.protocol.hashing import sha256_hex
    from waypoint.protocol.messages import calls_of
    from waypoint.protocol.vocabulary import (
        CONTEXT_FULL,
        CONTEXT_WINDOW_EXCEEDED,
        INVALID_REQUEST,
        MAX_TOKENS,
        PAUSE_TURN,
        TRANSCRIPT_MISSING,
    )

from waypoint._workflows import budget, cancel, containers, operator, steering
from waypoint._workflows.compacting import Compacting
from waypoint._workflows.events import said
from waypoint._workflows.steps import (
    OnSteps,
    Steps,
    activity_id,
    asked_again,
    failure,
)

MAX_CONTINUATIONS = 3
"""A turn continues a paused or cut-off answer at most this many times."""


class ModelSteps(Compacting, OnSteps):
    """Model calls, their accounting, and compaction of the transcript (`compacting.py`)."""

    def __init__(self, steps: Steps) -> None:
        super().__init__(steps)
        self.folding = 0
        """While a compaction runs: the messages before this index are being summarised."""
        self.steering = steering.Steering(self.s, self.gates, steps.publish)
        self.reread: Callable[[], Awaitable[bool]] | None = None
        """Reads stale `fresh_for` reads again (`Freshness.before_model`); True: a note waits."""
        self._at: tuple[int, int | None] | None = None
        """The turn's step in progress: its phase and output budget (`OpenWait.phase`)."""
        if (summary := self.gates.handover.summary) is not None:  # parked at the handover
            self.gates.handover.first = lambda: self.compact(carried=summary)

    @property
    def spec(self) -> AgentSpec:
        """The spec in force."""
        return self.steps.spec

    # --- a turn -----------------------------------------------------------------------------

    async def turn(self) -> ModelResponse:
        """The model's reply for this turn, after every re-ask its stop reason calls for.

        A turn handed over as one of its steps waited goes on at that step (`OpenWait.phase`).
        """
        carried = self.gates.handover.model_wait()
        at: tuple[int, str, int | None] | None = (0, f"t{self.s.turn}.model", None)  # first call
        try:
            if carried is not None:
                at = (carried.phase, carried.step_id, carried.max_tokens)
                self._at = (carried.phase, carried.max_tokens)
                if carried.compact:  # its summary step parked first: written, then it is called
                    await self.compact("ctx", carried.step_id, carried)
                    carried = None
            elif self.context_full():
                self._at = (0, None)
                await self.compact("ctx", at[1])
            while True:
                phase, step_id, max_tokens = at
                self._at = (phase, max_tokens)
                response = await self.call(step_id, max_tokens, carried)
                carried, at = None, self._next(phase, response)
                if at is None:
                    return response
        finally:
            self._at = None

    def _next(self, phase: int, response: ModelResponse) -> tuple[int, str, int | None] | None:
        """The turn's next step after the one at `phase` answered: its phase, id and budget."""
        turn, full = self.s.turn, self.spec.settings.max_output_tokens
        if phase == 0 and response.stop_reason == MAX_TOKENS and self._max_tokens() < full:
            return 1, f"t{turn}.model.full", full
        k = max(phase, 1)  # the continuation to ask for
        calls = any(isinstance(b, ToolUseBlock) for b in response.content)
        paused = response.stop_reason == PAUSE_TURN
        cut_text = response.stop_reason == MAX_TOKENS and not calls
        if k > MAX_CONTINUATIONS or not (paused or cut_text):
            return None
        if response.content:
            self.steps.append(Message(role="assistant", content=response.content))
        return 1 + k, f"t{turn}.model.cont{k}", full if cut_text else None

    def _max_tokens(self) -> int:
        return (self.s.limits or Limits()).max_tokens_per_call

    def _input_hash(self) -> str:
        s, spec = self.s, self.spec
        return self.steps.digest(
            {
                "model": spec.model,
                "system": sha256_hex(spec.system),
                "tools": [t.schema_hash for t in spec.tools],
                "transcript": s.transcript_hash,
            }
        )

    async def call(
        self, step_id: str, max_tokens: int | None = None, carried: OpenWait | None = None
    ) -> ModelResponse:
        """One recorded model step over the transcript; parks on an outage, never fails the run.

        Its reservation counts the steers waiting for it, and is made again after a park (a
        correction or a lowered limit meanwhile), so what the call sends fits the budgets.
        `carried`: the step waited at a handover; it goes on with its ledger line, parked again.
        """
        s = self.s
        record = self.gates.handover.carried_record(step_id) if carried is not None else None
        if record is not None and carried is not None and carried.kind == "context_full":
            return await self._context_full(record, max_tokens)  # answered, parked after it
        again = None  # parked at the handover: (kind, message) it parks in again, not called
        if record is None:
            parks = self.gates.parks
            await self._reserve_turn(step_id, max_tokens)
            while self.gates.parks != parks and await self._reread():  # waited at the budget
                parks = self.gates.parks
                await self._reserve_turn(step_id, max_tokens)  # the note fits too
            self.steering.deliver()  # steers accepted until now, reserved: this step reads them
            record = self.steps.record(step_id, "model", self._input_hash())
        elif carried is not None and carried.kind == "model_limit":  # at a limit after a park
            await self._reserve_turn(record.step_id, max_tokens)  # parked there again
            if self.steering.waiting():  # steered while parked at the budget
                return await self.call(self.steering.supersede(record), max_tokens)
        elif carried is not None and carried.kind != "model_paused":  # parked in that state
            invalid = carried.kind == "request_invalid"
            again = (INVALID_REQUEST if invalid else "", s.last_model_error)
        prefix_hash, prefix_len, retry = s.stored_hash, s.stored_len, 0
        while True:
            sent = s.transcript_hash
            if again is None:
                try:
                    response = await self._call_model(
                        record, prefix_hash, prefix_len, max_tokens, retry
                    )
                    break
                except steering.Interrupted as cut:  # a steer: ask again with its message
                    return await self.call(self.steering.account(record, cut), max_tokens)
                except ActivityError as err:
                    cancel.end_step(s, record, err)  # a cancel is not an outage: the run ends
                    kind, message = failure(err)
                if kind == TRANSCRIPT_MISSING and prefix_hash:
                    workflow.logger.info("%s: worker lacks the transcript, resending", step_id)
                    prefix_hash, prefix_len, retry = "", 0, retry + 1
                    continue
                if kind == CONTEXT_WINDOW_EXCEEDED and self.foldable("ctx"):
                    record.status = "error"
                    record.summary = f"context window exceeded, compacted: {message}"[:160]
                    await self.compact("ctx", asked_again(step_id, "c"))
                    return await self.call(asked_again(step_id, "c"), max_tokens)
            else:
                (kind, message), again = again, None
            await self._park(record, kind, message, handed=True)
            if self.steering.waiting():  # steered while parked: asked again with it
                return await self.call(self.steering.supersede(record), max_tokens)
            await self._reserve_turn(record.step_id, max_tokens)  # corrected meanwhile?
            if self.steering.waiting():  # steered while parked at the budget
                return await self.call(self.steering.supersede(record), max_tokens)
            if await self._reread():  # reads went stale while parked: asked with them
                record.status = "error"
                record.summary = f"asked again with stale reads read again: {message}"[:160]
                return await self.call(asked_again(step_id, "f"), max_tokens)
            prefix_hash, prefix_len, retry = s.stored_hash, s.stored_len, retry + 1
        if s.transcript_hash == sent:  # else corrected in flight: the worker holds the old one
            s.stored_hash, s.stored_len = s.transcript_hash, len(s.messages)
        calls = calls_of(response.content)  # the ledger line and the Web UI name them
        stop = response.stop_reason
        self._account(record, response, f"{stop}: {', '.join(calls)}" if calls else stop)
        cancel.honour()  # cancelled while the answer came: counted, now the run ends
        if stop == CONTEXT_FULL:
            if await self.compact("ctx", asked_again(step_id, "c")):
                return await self.call(asked_again(step_id, "c"), max_tokens)
            return await self._context_full(record, max_tokens)
        return response

    async def _context_full(self, record: StepRecord, max_tokens: int | None) -> ModelResponse:
        """Park after a step whose answer filled the context window, nothing left to compact.

        The step is paid and kept; `resume` asks again (`tN.model.c1`). The park may be handed
        to the next history segment, which parks here again without calling the model.
        """
        await self.gates.model_unavailable(
            record,
            "the transcript fills the model's context window and nothing is left "
            "to compact; correct a large tool result (`waypoint correct`) or fork the run",
            self._note("context_full", record.step_id),
        )
        return await self.call(asked_again(record.step_id, "c"), max_tokens)

    async def _reread(self) -> bool:
        """After a park: stale reads read again; True when what changed is now in the prompt."""
        if self.reread is None or not await self.reread():
            return False
        operator.deliver_notes(self.s)
        return True

    async def _park(
        self, record: StepRecord, kind: str, message: str, handed: bool = False, then: str = ""
    ) -> None:
        """Wait for `resume`: in `request_invalid` when the API rejected the request itself.

        `handed`: the park may be handed over. `then`: `record` is a summary step, which the
        turn's step `then` waits for ('' none: written before a continue-as-new).
        """
        state = "request_invalid" if kind == INVALID_REQUEST else "model_unavailable"
        if ".compact" in record.step_id:  # a summary step: the turn's `then` waits for it
            note = self.summary_note(state, record.step_id, then, handed)
        else:
            note = self._note(state, record.step_id) if handed else None
        if kind == INVALID_REQUEST:
            await self.gates.request_invalid(record, message, note)
        else:
            await self.gates.model_unavailable(record, message, note)

    def _note(self, kind: str, step_id: str) -> OpenWait | None:
        """The wait of the turn's step in progress, for a handover; None outside a turn."""
        if self._at is None:
            return None
        phase, max_tokens = self._at
        return OpenWait(kind=kind, step_id=step_id, phase=phase, max_tokens=max_tokens)  # type: ignore[arg-type]

    async def _call_model(
        self,
        record: StepRecord,
        prefix_hash: str,
        prefix_len: int,
        max_tokens: int | None,
        retry: int,
    ) -> ModelResponse:
        """One model call that sends only the messages the worker's store does not hold."""
        s, spec = self.s, self.spec
        label = spec.model if spec.provider == "anthropic" else f"scripted ({spec.model})"
        request = self._request(record, spec.system, spec.tools, s.messages[prefix_len:])
        update: dict[str, object] = {"prefix_hash": prefix_hash, "prefix_len": prefix_len}
        if max_tokens is not None:
            update["max_tokens"] = max_tokens
        request = request.model_copy(update=update)
        held = self._note("model_paused", record.step_id)  # a pause may hand it over
        return await self._execute(request, record, retry, f"t{s.turn} model {label}", held)

    def _request(
        self, record: StepRecord, system: str, tools: list[ToolSpec], messages: list[Message]
    ) -> ModelRequest:
        s, spec = self.s, self.spec
        return ModelRequest(
            step_id=record.step_id,
            turn=s.turn,
            model=spec.model,
            provider=spec.provider,
            agent=spec.name,
            system=system,
            tools=tools,
            messages=messages,
            max_tokens=self._max_tokens(),
            settings=spec.settings,
            bounds=spec.bounds,
            server_tools=spec.server_tools,
            container=s.container.id if s.container else None,
        )

    async def _reserve_turn(self, step_id: str, max_tokens: int | None) -> None:
        """Reserve a turn's call: the transcript and every steer waiting to go with it."""
        s = self.s
        await self._reserve(
            step_id,
            lambda: budget.turn_estimate(s, self.spec),
            max_tokens or self._max_tokens(),
            steers=True,
            note=self._note("model_limit", step_id),  # parked at a limit: may be handed over
        )

    async def _reserve(
        self,
        step_id: str,
        estimate: Callable[[], int],
        max_tokens: int,
        steers: bool = False,
        note: OpenWait | None = None,
    ) -> None:
        """Park in `limit_reached` until the worst case fits (`estimate` is asked at each wake)."""

        def refusal() -> str:
            return budget.refusal(self.s, self.spec, step_id, estimate(), max_tokens, steers)

        if refusal():
            await self.gates.within_limits(refusal, note)

    async def _execute(
        self,
        request: ModelRequest,
        record: StepRecord,
        retry: int,
        summary: str,
        held: OpenWait | None = None,
    ) -> ModelResponse:
        opts = self.s.input.options
        await self.gates.before_step(held)  # every model call: none starts while it is paused
        return await self.steering.call(  # a turn's call, a steer may cut it short
            "waypoint.call_model",
            request,
            result_type=ModelResponse,
            task_queue=self.steps.agent_queue(),
            activity_id=activity_id(record, retry),
            start_to_close_timeout=opts.model_timeout,
            heartbeat_timeout=opts.model_heartbeat_timeout,
            retry_policy=self.steps.retry_policy(opts.model_max_attempts),
            summary=summary,
        )

    def _account(self, record: StepRecord, response: ModelResponse, summary: str) -> None:
        """Record a finished model step and add what it cost to the run's totals."""
        s = self.s
        record.status = "completed"
        record.attempt = response.attempt
        record.tokens = response.usage.total
        record.cost_usd = response.cost_usd
        record.summary = summary
        said(record.step_id, response.content)
        s.total_tokens += response.usage.total
        s.cost_known = s.cost_known and response.cost_usd is not None
        s.cost_usd += response.cost_usd or 0.0
        containers.keep(s, response)
        record.stop_reason = response.stop_reason
        s.last_context_tokens = response.usage.context_tokens + response.usage.output_tokens
        self.steps.publish()
