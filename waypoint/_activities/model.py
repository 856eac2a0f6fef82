"""`call_model`: one model step, answered by the provider the run's spec names."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

from temporalio import activity
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

from waypoint._activities import journal
from waypoint._activities.heartbeat import heartbeating
from waypoint._activities.step_log import StepLog
from waypoint._providers import spend
from waypoint._providers.bounds import bounded
from waypoint._providers.live import live_step
from waypoint.protocol import ModelRequest, ModelResponse, PartialSpend
from waypoint.protocol.bounds import SizeLimits
from waypoint.protocol.steps import MODEL_CANCELLED
from waypoint.protocol.vocabulary import MODEL_NOT_CONFIGURED
from waypoint.stores.transcripts import TranscriptStore

REPLY_LIMIT = 2 * 1024 * 1024 - 64 * 1024
"""The largest reply a worker without a payload store returns: Temporal refuses a payload over
2 MiB (its default blob limit), less room for the envelope. Only server tool results get near it
(a fetched PDF): Claude writes at most 128K tokens."""


class ModelProvider(Protocol):
    """Anything that can answer a Messages API request: Claude, or the scripted model."""

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Answer one request."""
        ...


class ModelActivities:
    """Holds the providers; Temporal owns retries, so providers never retry on their own."""

    def __init__(
        self,
        providers: Mapping[str, ModelProvider],
        step_log: Path | None = None,
        transcripts: TranscriptStore | None = None,
        live_text: bool = True,
        offloaded: bool = False,
    ) -> None:
        self.providers = dict(providers)
        self.offloaded = offloaded
        """Payloads over the store's threshold go to a payload store: any reply fits."""
        self.live_text = live_text
        self.step_log = StepLog(step_log)
        self.transcripts = transcripts or TranscriptStore()

    @activity.defn(name="waypoint.call_model")
    async def call_model(self, request: ModelRequest) -> ModelResponse:
        """Call the model once and record which attempt produced the answer."""
        provider = self.providers.get(request.provider)
        if provider is None:
            raise ApplicationError(
                f"this worker has no {request.provider!r} model provider; the run was started "
                f"by a worker that had one (for 'anthropic': ANTHROPIC_API_KEY, "
                "ANTHROPIC_AUTH_TOKEN, or WAYPOINT_CLAUDE=bedrock|vertex)",
                type=MODEL_NOT_CONFIGURED,
                non_retryable=False,
            )
        self.step_log.write(request.step_id, activity.info().attempt)
        if request.purpose == "turn":
            # Store I/O (an fsync per node, or S3 round trips) off the event loop, where it
            # would delay other activities' heartbeats until they time out and are retried.
            prefix = await asyncio.to_thread(
                self.transcripts.load, request.prefix_hash, request.prefix_len
            )
            await asyncio.to_thread(
                self.transcripts.extend, request.prefix_hash, request.messages, prefix
            )
            request = request.model_copy(update={"messages": prefix + request.messages})
        # Heartbeat here, whatever the provider: one that says nothing for longer than the
        # model heartbeat timeout (a scripted or custom provider, a slow first token) would
        # otherwise be retried while it still runs. A heartbeat's answer is also how a steer's
        # cancel reaches the call.
        answering = heartbeating(provider.complete(request), f"model step {request.step_id}")
        earlier = _cut_short()  # what an attempt a crash cut short had spent, if it said
        if earlier is not None:  # kept at once: a crash before this attempt reports loses none
            journal.note_spend(earlier)

        def keep(spent: spend.Tally) -> None:  # beside this attempt, for a retry after a crash
            journal.note_spend(_with_earlier(spent.spend(activity.info().attempt), earlier))

        with spend.tally(on_report=keep) as spent:
            try:
                if self.live_text:
                    async with live_step(request.step_id):
                        response = await answering
                else:
                    response = await answering
            except asyncio.CancelledError:
                _report_cancelled(spent, earlier)
                raise
        # Bounded before Temporal records it: a reply the run could not read back would wedge it.
        checked = bounded(response, request.bounds or SizeLimits())
        if not self.offloaded and (size := _payload_bytes(checked)) > REPLY_LIMIT:
            # Returned, Temporal would refuse it and the step be retried: paid for again each
            # time, never recorded. Parked instead, until a worker with a store resumes it.
            raise ApplicationError(
                f"the model's reply is {size / 1024 / 1024:.1f} MiB, over Temporal's 2 MiB "
                "payload limit, and this worker has no payload store: give the workers one "
                "(WAYPOINT_PAYLOAD_STORE=FOLDER or WAYPOINT_STORE=s3://...), then `waypoint "
                "resume` (the step is called again)",
                type="ReplyTooLarge",
                non_retryable=True,
            )
        update: dict[str, object] = {"attempt": activity.info().attempt}
        if earlier is not None:  # billed with this answer: the ledger counts what was paid
            update["usage"] = spend.plus(checked.usage, earlier.usage)
            known = earlier.known and checked.cost_usd is not None
            update["cost_usd"] = (
                (checked.cost_usd or 0) + (earlier.cost_usd or 0) if known else None
            )
        return checked.model_copy(update=update)


def _cut_short() -> PartialSpend | None:
    """What the attempt before this one had spent, when the journal freed it after a crash."""
    for detail in activity.info().heartbeat_details:
        with contextlib.suppress(ValueError, TypeError):
            return PartialSpend.model_validate(detail)
    return None


def _with_earlier(spent: PartialSpend, earlier: PartialSpend | None) -> PartialSpend:
    """This attempt's spend so far, with the earlier cut attempts' added."""
    if earlier is None:
        return spent
    known = spent.known and earlier.known
    cost = (spent.cost_usd or 0) + (earlier.cost_usd or 0) if known else None
    usage = spend.plus(spent.usage, earlier.usage)
    return spent.model_copy(update={"usage": usage, "known": known, "cost_usd": cost})


def _payload_bytes(response: ModelResponse) -> int:
    """The reply's size as Temporal will hold it (pydantic's JSON): bytes, not characters."""
    return len(response.model_dump_json().encode())


def _report_cancelled(spent: spend.Tally, earlier: PartialSpend | None = None) -> None:
    """Fail a call the run cancelled with what it spent, so the ledger can record and cost it.

    A cancel that is not the run's (a worker shutting down) stays a cancel: the step is retried.
    """
    why = activity.cancellation_details()
    if why is None or not why.cancel_requested:
        return
    spent_so_far = _with_earlier(spent.spend(activity.info().attempt), earlier)
    raise ApplicationError(
        "the run cancelled this model step; what it had spent is in the details",
        spent_so_far,
        type=MODEL_CANCELLED,
        non_retryable=True,
        category=ApplicationErrorCategory.BENIGN,
    ) from None
