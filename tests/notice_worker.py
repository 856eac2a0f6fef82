"""A worker process hosting the payer agent with the test notice receiver, to be SIGKILLed.

`python -m tests.notice_worker ADDRESS QUEUE FOLDER`: payments and the inbox live in FOLDER;
the first try of each `waiting` notice touches FOLDER/reached and stalls there.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from tests.agents import PAY_SCRIPT, Payments, build_agent
from waypoint._worker import build_worker
from waypoint.protocol.notices import NoticePlan
from waypoint.testing.notices import NoticeReceiver

PLAN = NoticePlan(routes={"approver": ["ops"]})


async def main(address: str, queue: str, folder: Path) -> None:
    """Serve until killed."""
    client = await Client.connect(address, data_converter=pydantic_data_converter)
    receiver = NoticeReceiver(folder / "inbox.db", PLAN, reached=folder / "reached", stall=60)
    agent = build_agent(Payments(folder / "payments.db"), PAY_SCRIPT, approval=True)
    worker = build_worker(client, [agent], task_queue=queue, activities=receiver.activities())
    async with worker:
        print("worker ready", flush=True)
        await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], Path(sys.argv[3])))
