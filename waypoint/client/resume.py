"""Continue a parked run: retry its parked step, or raise the limit it stopped at.

A run parked in one of `RESUMABLE_STATES` (an outage, an invalid request or output, a tool that
changed) gets the `resume` signal; any other run gets `raise_limits` with the limits named
raised (the current ones need a worker's answer). The CLI's `waypoint resume` and the console
both send through here.
"""

from __future__ import annotations

from dataclasses import dataclass

from temporalio.client import Client

from waypoint.client import views
from waypoint.client.runs import handle, status
from waypoint.errors import RunClosedError, WaypointError
from waypoint.protocol import Limits, ResumeRequest
from waypoint.protocol.states import RESUMABLE_STATES

WHAT_RESUMES = {
    "model_unavailable": "its model step is retried",
    "request_invalid": "its model step is sent again (it fails again unless its cause was fixed)",
    "output_invalid": "the model gets more tries at its final answer",
    "tool_changed": "its step runs again (it parks again unless the tool is as the run began)",
}
REPLANS = "the model is told its tool changed; the run takes the new build's tools, nothing else"


@dataclass(frozen=True)
class Resumed:
    """What a resume did: which state it found, and what it asked of the run."""

    state: str
    what: str
    """What the run does now; for raised limits, which (`max_turns=12`)."""
    detail: str = ""
    limits: Limits | None = None
    """The raised limits, when it raised them."""


async def resume(
    client: Client,
    run: str,
    *,
    reviewer: str,
    replan: bool = False,
    max_turns: int | None = None,
    max_cost_usd: float | None = None,
    max_total_tokens: int | None = None,
) -> Resumed:
    """Resume a parked run, or raise its limits.

    Raises:
        RunClosedError: The run has ended.
        WaypointError: `replan` for a run not in `tool_changed`, no limit given, or one that
            is not higher than the run's (or the run has none: nothing to raise).
    """
    view = await views.view(client, run, ask_worker=False)
    if view.closed:
        raise RunClosedError(f"run {run!r} is {view.execution}: nothing to resume")
    if replan and view.state != "tool_changed":
        raise WaypointError(
            f"run {run!r} is {view.state}: replan is for a run parked in tool_changed"
        )
    detail = view.memo.detail if view.memo else ""
    if view.state in RESUMABLE_STATES:
        await handle(client, run).signal("resume", ResumeRequest(reviewer=reviewer, replan=replan))
        what = REPLANS if replan else WHAT_RESUMES.get(view.state, "it goes on")
        return Resumed(state=view.state, what=what, detail=detail)
    changes = {
        k: v
        for k, v in {
            "max_turns": max_turns,
            "max_cost_usd": max_cost_usd,
            "max_total_tokens": max_total_tokens,
        }.items()
        if v is not None
    }
    if not changes:
        raise WaypointError(
            f"run {run!r} is {view.state}: give a new limit (max turns, max cost in USD, "
            "max total tokens) to raise"
        )
    await status(client, run, timeout=views.QUICK)  # the current limits need a worker
    limits = await handle(client, run).query("limits", result_type=Limits)
    lower = [
        f"{name}={value} (now {getattr(limits, name)})"
        for name, value in changes.items()
        if getattr(limits, name) is None or value <= getattr(limits, name)
    ]
    if lower:
        raise WaypointError(
            f"run {run!r}: {', '.join(lower)} would not raise the limit; give a higher one"
        )
    raised = limits.model_copy(update=changes)
    await handle(client, run).signal("raise_limits", raised)
    shown = ", ".join(f"{name}={value}" for name, value in changes.items())
    return Resumed(state=view.state, what=shown, detail=detail, limits=raised)
