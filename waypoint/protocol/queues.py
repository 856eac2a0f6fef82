"""Which task queue a run lives on: its agent's own, polled only by workers that host it.

A run needs its agent for every step (spec, script, tools, output type), so `waypoint start`
puts it on `{queue}@{agent}`, which only workers hosting that agent poll, and its steps go to
the same queue: a run never reaches a worker that lacks its agent, and its activities can be
handed to the worker that completes its workflow task (eager dispatch) as on a plain queue.
The shared `{queue}` still serves runs started there by other clients and runs started before
agents had queues; their steps are sent to the agent's queue. `@` is reserved in queue names.
Pure: workflow code imports it.
"""

from __future__ import annotations


def shared_queue(task_queue: str) -> str:
    """The queue a worker was started on, from a run's queue (shared or an agent's)."""
    return task_queue.split("@", 1)[0]


def agent_queue(task_queue: str, agent: str) -> str:
    """The queue of `agent`'s runs and steps, from the shared queue or any agent's queue."""
    return f"{shared_queue(task_queue)}@{agent}"
