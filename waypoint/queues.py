"""Which task queue a run's steps go to: its agent's own, polled only by workers that host it.

Every worker runs any run's workflow code from the shared queue (`AgentWorkflow` is the same
for every agent), but a step needs the agent itself: its spec, script, tools and output type.
So a run's steps go to `{queue}@{agent}`, and never to a worker that lacks the agent; with no
such worker up, a step waits on that queue until one starts. Pure: workflow code imports it.
"""

from __future__ import annotations


def agent_queue(task_queue: str, agent: str) -> str:
    """The queue for the steps of `agent`'s runs started on `task_queue`."""
    return f"{task_queue}@{agent}"
