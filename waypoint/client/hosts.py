"""Which agents the workers on a queue host, asked of the server before a run is started.

A worker polls the shared queue and the queue of each agent it hosts (`waypoint.protocol.queues`),
and the server remembers a poller for a few minutes after its last poll. So an agent is hosted
when its queue has been polled lately. The server lists no queues by name, so the agents hosted
are named from those that have had runs on the queue (visibility), each asked of its own queue:
an agent hosted but never run there yet is not named. Client-side I/O; no agent code needed.
"""

from __future__ import annotations

import asyncio
import re

from temporalio.client import Client
from temporalio.service import RPCError

from waypoint.client import views
from waypoint.errors import AgentNotHostedError
from waypoint.protocol import search_attributes as sa
from waypoint.protocol.queues import agent_queue, shared_queue

GRACE = 2.0
"""Seconds a start waits for the agent's queue once the shared one is polled: one worker polls
all its queues together, so a worker that hosts the agent is seen there within milliseconds."""
POLL = 0.1
"""Seconds between two looks while waiting for a worker."""
TRUSTED = 60.0
"""Seconds a queue seen polled is taken as polled without asking again (the server's own memory
of a poller is minutes long): a program starting runs in a loop asks once a minute, not per run."""
NAMED = 20
"""Agents named at most when a start is refused."""
SAFE = re.compile(r"[\w.@:-]+")
"""Names that can go into a visibility query's string literal as they are."""

_polled_at: dict[tuple[str, str, str], float] = {}


async def polled(client: Client, task_queue: str) -> bool:
    """Whether a worker has polled `task_queue` for runs lately (a recent yes is remembered)."""
    key = (client.service_client.config.target_host, client.namespace, task_queue)
    now = asyncio.get_running_loop().time()
    if now - _polled_at.get(key, -TRUSTED) < TRUSTED:
        return True
    if not await views.has_pollers(client, task_queue):
        return False
    _polled_at[key] = now
    return True


async def require_host(client: Client, task_queue: str, agent: str, *, wait: float) -> None:
    """Return once a worker polling `task_queue` hosts `agent`; refuse when none does.

    Waits up to `wait` seconds while no worker polls the queue at all (one being started beside
    this start, as in `waypoint worker & waypoint start ...`), and `GRACE` once one does.

    Raises:
        AgentNotHostedError: No worker on the queue hosts the agent; it names those hosted.
    """
    shared = shared_queue(task_queue)
    loop = asyncio.get_running_loop()
    began = loop.time()
    shared_since: float | None = None
    while not await polled(client, agent_queue(shared, agent)):
        now = loop.time()
        if shared_since is None and await polled(client, shared):
            shared_since = now
        waited = now - (began if shared_since is None else shared_since)
        if waited >= (wait if shared_since is None else GRACE):
            raise await _not_hosted(client, shared, agent, any_worker=shared_since is not None)
        await asyncio.sleep(POLL)


async def hosted_agents(client: Client, task_queue: str) -> list[str]:
    """The agents a worker on the queue hosts now, of those that have had runs on it.

    One visibility query per name (each excluding the names found), at most `NAMED` hosted
    ones; best effort: a server whose visibility cannot answer leaves the list short.
    """
    shared = shared_queue(task_queue)
    if not SAFE.fullmatch(shared):
        return []
    runs_here = (
        f"WorkflowType = 'AgentWorkflow' AND {sa.AGENT.name} IS NOT NULL AND "
        f"(TaskQueue = '{shared}' OR TaskQueue STARTS_WITH '{shared}@')"
    )
    seen: list[str] = []
    hosted: list[str] = []
    try:
        while len(hosted) < NAMED and len(seen) < 3 * NAMED:
            others = ", ".join(f"'{name}'" for name in seen)
            query = runs_here + (f" AND {sa.AGENT.name} NOT IN ({others})" if seen else "")
            found = ""
            async for run in client.list_workflows(query, limit=1):
                found = str(run.typed_search_attributes.get(sa.AGENT) or "")
            if not SAFE.fullmatch(found):  # none left, or a name a query cannot carry
                break
            seen.append(found)
            if await polled(client, agent_queue(shared, found)):
                hosted.append(found)
    except RPCError:  # e.g. a visibility store without STARTS_WITH: name what was found
        pass
    return sorted(hosted)


async def _not_hosted(
    client: Client, shared: str, agent: str, *, any_worker: bool
) -> AgentNotHostedError:
    anyway = "pass --queue-anyway (queue_anyway=True) to start it now: the run waits until one does"
    if not any_worker:
        message = (
            f"no worker polls queue {shared!r}, so none hosts agent {agent!r}: start "
            f"`waypoint worker` with an app that has {agent!r} (WAYPOINT_TASK_QUEUE={shared}), "
            f"or {anyway}"
        )
        return AgentNotHostedError(message, agent=agent, task_queue=shared, hosted=[])
    hosted = await hosted_agents(client, shared)
    named = ", ".join(hosted) if hosted else "none of the agents that have run on it"
    message = (
        f"no worker on queue {shared!r} hosts agent {agent!r} (hosted there: {named}); "
        f"a misspelt name? For a worker still being deployed, {anyway}"
    )
    return AgentNotHostedError(message, agent=agent, task_queue=shared, hosted=hosted)
