"""The code-execution container a run's calls share. Deterministic code only.

Code execution runs in a container the API makes on the first call that uses it and names in
the reply (`container.id`, `expires_at`); a later call that names it finds the files the earlier
ones wrote. The run keeps it in its state (carried across continue-as-new; a fork starts
without one, as `fork_state` builds a fresh state), sends it with every call, and once it has
expired sends none: the API starts a new one, and the model is told its files are gone.
"""

from __future__ import annotations

from datetime import datetime

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from waypoint.protocol import AgentState, ModelResponse


def expire(s: AgentState) -> None:
    """Forget an expired container, leaving the model a note that its files are gone."""
    if s.container is None:
        return
    try:
        ends = datetime.fromisoformat(s.container.expires_at)
    except ValueError:
        ends = None  # an expiry the run cannot read: the API says when it is gone
    if ends is not None and workflow.now() >= ends:
        s.notes.append(
            f"The code execution container {s.container.id} expired at "
            f"{s.container.expires_at}: the files written in it are gone. A new container "
            "starts empty; recreate what you still need from this conversation."
        )
        s.container = None


def keep(s: AgentState, response: ModelResponse) -> None:
    """The container a reply ran in is the one later calls reuse."""
    if response.container is not None:
        s.container = response.container


def left_behind(s: AgentState) -> list[str]:
    """A fork's note that its source's container (and the files in it) is not its own."""
    if s.container is None:
        return []
    return [
        f"This run is a fork: the code execution container {s.container.id} stayed with the "
        "run it was forked from, so files written there are not here. A new container starts "
        "empty; recreate what you still need from this conversation."
    ]
