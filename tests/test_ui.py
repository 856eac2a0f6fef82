"""What the Web UI shows without reading JSON: search attributes, summaries, current details."""

from __future__ import annotations

from pathlib import Path

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.converter import DefaultPayloadConverter

from tests.agents import PAY_SCRIPT, Payments, build_agent
from tests.conftest import running_worker, wait_for_state
from waypoint.client import runs
from waypoint.protocol import search_attributes as sa


async def test_run_is_readable_from_the_ui_alone(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    agent = build_agent(Payments(tmp_path / "p.db"), PAY_SCRIPT, approval=True)
    async with running_worker(client, [agent], task_queue):
        handle = await runs.start_run(client, "payer", "pay ada 5", task_queue=task_queue)
        await wait_for_state(client, handle.id, "awaiting_approval")
        described = await handle.describe()
        attrs = described.typed_search_attributes
        assert attrs.get(sa.AGENT) == "payer"
        assert attrs.get(sa.STATUS) == "awaiting_approval"
        assert attrs.get(sa.PENDING_APPROVALS) == 1
        assert attrs.get(sa.TURNS) == 2
        assert attrs.get(sa.COST_USD) == 0.0
        assert await described.static_summary() == "payer: pay ada 5"
        details = (await handle.query("__temporal_workflow_metadata")).current_details
        assert "**payer**: `awaiting_approval`" in details
        assert f"`waypoint approve {handle.id} t2.tool.1.pay`" in details
        assert "t1.tool.1.weather" in details
        await runs.approve(client, handle.id, "t2.tool.1.pay", reviewer="me")
        await handle.result()
        done = (await handle.describe()).typed_search_attributes
        assert done.get(sa.STATUS) == "done" and done.get(sa.PENDING_APPROVALS) == 0
    summaries = []
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            summaries.append(DefaultPayloadConverter().from_payload(event.user_metadata.summary))
    assert summaries[:5] == [
        "load spec payer",
        "t1 model scripted (claude-sonnet-4-6)",
        "t1 tool weather",
        "t1 tool add",  # a pure tool too: it runs on its agent's queue, as an activity
        "t2 model scripted (claude-sonnet-4-6)",
    ]
    assert "t2 tool pay" in summaries
