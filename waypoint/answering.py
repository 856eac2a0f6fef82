"""Answer a client-answered tool from the client: an Update when a worker answers, else a signal.

The step is first checked against the run's pending questions (the worker's answer, or the
run's memo when none answers), so a typo is refused here. Whether the result fits the tool's
output schema is checked by the run: the Update refuses a wrong answer with its reason; a
signal with a wrong answer is recorded as ignored, and the run keeps waiting.
"""

from __future__ import annotations

from typing import Any

from temporalio.client import Client

from waypoint.deciding import QUERY_TIMEOUT, Sent, _deliver, _open_view
from waypoint.errors import StepNotPendingError
from waypoint.models import ClientAnswer


async def answer(
    client: Client,
    run: str,
    step_id: str,
    result: dict[str, Any],
    *,
    sender: str = "unknown",
    timeout: float = QUERY_TIMEOUT,
) -> Sent:
    """Give a pending client tool call its result.

    Raises:
        RunClosedError: The run has ended.
        StepNotPendingError: The step is not waiting for an answer.
        DecisionRefusedError: The run refused the answer (e.g. it does not fit the output type).
    """
    seen = await _open_view(client, run, timeout, "answer")
    waiting = seen.live.pending_questions if seen.live else seen.memo.pending_questions  # type: ignore[union-attr]
    if step_id not in {q.step_id for q in waiting}:
        raise StepNotPendingError(
            f"step {step_id!r} of run {run!r} is not waiting for an answer "
            f"(waiting: {', '.join(q.step_id for q in waiting) or 'none'})"
        )
    given = ClientAnswer(step_id=step_id, result=result, sender=sender, identity=client.identity)
    return await _deliver(client, seen, "answer", given, timeout)
