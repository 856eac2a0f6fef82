"""Record the golden histories replayed by `test_replay.py`.

Run `python -m tests.record_histories` after a deliberate change of the workflow's shape; review
the diff of `tests/histories/` like code.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from tests.agents import PAY_SCRIPT, Payments, build_agent
from tests.conftest import running_worker, wait_for_state
from waypoint import runs
from waypoint import search_attributes as sa

HISTORIES = Path(__file__).parent / "histories"


async def record_approval_run(client: Client, workdir: Path) -> str:
    """A run with parallel tools, an approval and an effect."""
    agent = build_agent(Payments(workdir / "payments.db"), PAY_SCRIPT, approval=True)
    async with running_worker(client, [agent], "record"):
        handle = await runs.start_run(
            client, "payer", "pay ada 5", task_queue="record", workflow_id="golden-approval"
        )
        await wait_for_state(client, handle.id, "awaiting_approval")
        await runs.decide(client, handle.id, "t2.tool.1.pay", approve=True, reviewer="golden")
        await handle.result()
    return (await handle.fetch_history()).to_json()


async def main() -> None:
    temporal = Path(sys.executable).parent / "temporal"
    async with await WorkflowEnvironment.start_local(
        dev_server_existing_path=str(temporal),
        data_converter=pydantic_data_converter,
        search_attributes=sa.ALL,
    ) as env:
        with tempfile.TemporaryDirectory() as tmp:
            history = await record_approval_run(env.client, Path(tmp))
    HISTORIES.mkdir(exist_ok=True)
    (HISTORIES / "approval.json").write_text(history)
    print(f"wrote {HISTORIES / 'approval.json'}")


if __name__ == "__main__":
    asyncio.run(main())
