"""A run's agent spec as it snapshotted it, read from history: what its tools are and take.

Its tools' descriptions and input schemas let a page show a call's arguments as labelled,
formatted text (`waypoint._readable`). The spec is in the run's first events (the input
of a continued run, else the `t0.spec` step's result), so this reads a few events, needs no
worker and writes nothing. A spec does not change under a run id but by a replan, so it is
kept per execution (`CACHED` of them).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from waypoint.protocol import AgentSpec, RunInput

CACHED = 2048
AT_ONCE = 16
LOOK_AHEAD = 64
"""Events read at most: the spec is loaded by a run's first step."""
SPEC_STEP = "t0.spec#"
_specs: OrderedDict[tuple[str, str], AgentSpec] = OrderedDict()


async def run_spec(client: Client, run: str, run_id: str = "") -> AgentSpec | None:
    """The spec of `run`'s current execution (of `run_id`'s), or None if it cannot be read."""
    with contextlib.suppress(Exception):  # no spec: a page formats less, it does not fail
        run_id = run_id or (await client.get_workflow_handle(run).describe()).run_id or ""
        key = (run, run_id)
        if key in _specs:
            _specs.move_to_end(key)
            return _specs[key]
        found = await _read(client, run, run_id)
        if found is None:
            return None  # not loaded yet, maybe: ask again next time
        _specs[key] = found
        while len(_specs) > CACHED:
            _specs.popitem(last=False)
        return found
    return None


async def tools_of(client: Client, runs: dict[str, str]) -> dict[str, dict[str, dict]]:
    """Each run's tools' input schemas by tool name, for `runs` (id -> run id, '' for current).

    At most `AT_ONCE` history reads at a time: a long page is not a burst on the server.
    """
    gate = asyncio.Semaphore(AT_ONCE)

    async def one(run: str, run_id: str) -> AgentSpec | None:
        async with gate:
            return await run_spec(client, run, run_id)

    specs = await asyncio.gather(*(one(run, rid) for run, rid in runs.items()))
    return {
        run: {t.name: t.input_schema for t in spec.tools} if spec else {}
        for run, spec in zip(runs, specs, strict=True)
    }


async def _read(client: Client, run: str, run_id: str) -> AgentSpec | None:
    handle = client.get_workflow_handle(run, run_id=run_id or None)
    converter = client.data_converter
    scheduled: set[int] = set()
    async for event in handle.fetch_history_events(page_size=LOOK_AHEAD):
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
            started = event.workflow_execution_started_event_attributes
            (given,) = await converter.decode_wrapper(started.input, [RunInput])
            if given.resume is not None and given.resume.spec is not None:
                return given.resume.spec
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            if event.activity_task_scheduled_event_attributes.activity_id.startswith(SPEC_STEP):
                scheduled.add(event.event_id)
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            done = event.activity_task_completed_event_attributes
            if done.scheduled_event_id in scheduled:
                (spec,) = await converter.decode_wrapper(done.result, [AgentSpec])
                return spec
        if event.event_id >= LOOK_AHEAD:
            break
    return None
