"""Run the payer end to end, offline: a worker in this process, a run, an approval, the result.

Needs a Temporal server with Waypoint's search attributes (`waypoint server`, or any server
after `waypoint setup`); `TEMPORAL_ADDRESS` and `WAYPOINT_TASK_QUEUE` apply.
"""

from __future__ import annotations

import asyncio
import os
import sys
import uuid

from temporalio.client import Client

from examples.payments.agent import agents, bank
from waypoint import RunStuckError, build_worker, connect, runs


async def main() -> None:
    """Start a run, approve its payment as `ada`, print the result and the ledger."""
    client = await connect()
    queue = os.environ.get("WAYPOINT_TASK_QUEUE", "payments-example")
    async with build_worker(client, agents(), task_queue=queue):
        handle = await runs.start_run(
            client,
            "payer",
            "Pay ACME 250.00 for invoice 7",
            task_queue=queue,
            workflow_id=f"invoice-7-{uuid.uuid4().hex[:6]}",
        )
        print("started", handle.id)
        step = await _awaiting_approval(client, handle.id)
        sent = await runs.approve(client, handle.id, step, reviewer="ada")
        print("approved", step, "as ada:", "recorded" if sent.recorded else "sent")
        result = await handle.result()
        print("result:", result.output)
        for record in await runs.ledger(client, handle.id):
            print(f"  {record.step_id:<18} {record.status:<10} {record.decided_by or ''}")
        print("payments in the bank:", bank.count_payments())


async def _awaiting_approval(client: Client, run: str) -> str:
    """Wait until the run asks for an approval; the step id it waits on."""
    for _ in range(600):
        try:
            status = await runs.status(client, run)
        except RunStuckError:
            status = None
        if status is not None and status.pending_approvals:
            return status.pending_approvals[0].step_id
        await asyncio.sleep(0.05)
    raise TimeoutError(f"{run} never asked for an approval")


if __name__ == "__main__":
    asyncio.run(main())
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # temporalio 1.35 can crash at interpreter teardown after all work is done
