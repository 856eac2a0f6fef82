"""A cost budget refused before a run pays for anything."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from temporalio.client import Client, WorkflowFailureError

from tests.conftest import running_worker
from tests.fake_messages_api import FakeMessagesAPI
from waypoint._agent import Agent
from waypoint.client.runs import start_run
from waypoint.protocol import Limits

if TYPE_CHECKING:
    from waypoint._providers.claude.provider import AnthropicModel


async def refused_at_start(
    client: Client,
    task_queue: str,
    agent: Agent,
    api: FakeMessagesAPI,
    claude: AnthropicModel,
    max_cost_usd: float,
) -> str:
    """Start `agent` with a cost budget on `api`: the run fails before any model call. Why."""
    async with running_worker(client, [agent], task_queue, claude=claude):
        limits = Limits(max_cost_usd=max_cost_usd)
        handle = await start_run(client, agent.name, "go", task_queue=task_queue, limits=limits)
        with pytest.raises(WorkflowFailureError) as failed:
            await handle.result()
    assert not api.message_requests  # refused before any model call
    return str(failed.value.cause)
