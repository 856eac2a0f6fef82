"""The code-execution container a run's calls share: reused, forgotten once expired (issue 30.3).

Code execution writes files in a container the API names in its reply; a later call that
does not name it starts an empty one. Waypoint sent none, so every turn lost the files.
"""

from __future__ import annotations

from pathlib import Path

from temporalio.client import Client

from tests.agents import Payments, build_agent
from tests.conftest import Claude, running_worker
from tests.fake_messages_api import FakeMessagesAPI, text, tool_use
from tests.test_fork_continued import _state
from waypoint import Agent
from waypoint._workflows.operator import fork_state
from waypoint.client.runs import start_run
from waypoint.protocol import Container
from waypoint.server_tools import code_execution

LASTING = {"id": "container_011CNm", "expires_at": "2100-01-01T00:00:00Z"}
EXPIRED = {"id": "container_022Dxq", "expires_at": "2001-01-01T00:00:00Z"}


async def test_a_container_is_reused_until_it_expires_and_the_model_is_told(
    client: Client, task_queue: str, tmp_path: Path, api: FakeMessagesAPI, claude: Claude
) -> None:
    plain = build_agent(Payments(tmp_path / "p.db"), script=[])
    agent = Agent(
        name="coder",
        model=plain.model,
        system="Compute.",
        tools=plain.tools,
        server_tools=[code_execution()],
    )
    api.enqueue_message(tool_use("add", {"a": 1, "b": 2}), container=LASTING)
    api.enqueue_message(tool_use("add", {"a": 3, "b": 4}), container=EXPIRED)
    api.enqueue_message(text("Done."))
    async with running_worker(client, [agent], task_queue, claude=claude(api)):
        handle = await start_run(client, "coder", "compute", task_queue=task_queue)
        result = await handle.result()
    assert result.output == "Done."
    first, second, third = (r.body for r in api.message_requests)
    assert "container" not in first
    assert second["container"] == LASTING["id"]  # the files of call 1 are there for call 2
    assert "container" not in third  # expired: the API starts a new one
    told = [b["text"] for b in third["messages"][-1]["content"] if b["type"] == "text"]
    assert any(f"container {EXPIRED['id']} expired" in t for t in told)
    assert not any("expired" in str(m) for m in second["messages"])


def test_a_fork_starts_without_its_sources_container_and_is_told_so() -> None:
    source = _state()  # three finished turns
    source.container = Container(**LASTING)
    fork = fork_state(source, after_turn=1)
    assert fork.container is None
    assert any(LASTING["id"] in n and "fork" in n for n in fork.notes)
