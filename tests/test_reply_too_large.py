"""A reply too large for history parks its step, once, when no payload store takes it (30.2).

A server tool's result (a fetched PDF) can pass Temporal's 2 MiB payload limit. Returned, the
server would refuse it and the step be retried, paid for each time; so the worker refuses it
itself and the run parks until a worker with a payload store resumes it.
"""

from __future__ import annotations

from pathlib import Path

from temporalio.client import Client

from tests.agents import Payments, build_agent
from tests.conftest import Claude, running_worker, wait_for_state
from tests.fake_messages_api import FakeMessagesAPI, text
from waypoint import Agent
from waypoint.client.runs import start_run
from waypoint.protocol import ResumeRequest, RunResult
from waypoint.server_tools import web_fetch
from waypoint.stores.payloads import data_converter

FETCHED = {
    "type": "web_fetch_tool_result",
    "tool_use_id": "srvtoolu_1",
    "content": {
        "type": "web_fetch_result",
        "url": "https://example.org/big.pdf",
        "content": {
            "type": "document",
            "source": {"type": "base64", "media_type": "application/pdf", "data": "A" * 2_600_000},
        },
    },
}
CALL = {
    "type": "server_tool_use",
    "id": "srvtoolu_1",
    "name": "web_fetch",
    "input": {"url": "https://example.org/big.pdf"},
}


async def test_a_reply_over_the_payload_limit_parks_once_and_a_store_takes_it(
    client: Client, task_queue: str, tmp_path: Path, claude: Claude
) -> None:
    plain = build_agent(Payments(tmp_path / "p.db"), script=[])
    agent = Agent(name="reader", model=plain.model, system="Read.", server_tools=[web_fetch()])
    with FakeMessagesAPI() as api:
        api.enqueue_message(CALL, FETCHED, text("A big report."))
        api.enqueue_message(CALL, FETCHED, text("A big report."))
        async with running_worker(client, [agent], task_queue, claude=claude(api)):
            handle = await start_run(client, "reader", "read it", task_queue=task_queue)
            parked = await wait_for_state(client, handle.id, "model_unavailable")
        assert "MiB, over Temporal's 2 MiB payload limit" in parked.detail
        assert len(api.message_requests) == 1  # refused, not retried and paid for again
        stored = Client(
            client.service_client,
            namespace=client.namespace,
            data_converter=data_converter(tmp_path / "payloads"),
        )
        async with running_worker(stored, [agent], task_queue, claude=claude(api)):
            again = stored.get_workflow_handle(handle.id, result_type=RunResult)
            await again.signal("resume", ResumeRequest(reviewer="ops"))
            result = await again.result()
    assert result.state == "done" and result.output == "A big report."
    assert len(api.message_requests) == 2
