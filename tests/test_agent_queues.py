"""Workers on one queue that host different agents: every run lands on a worker with its agent.

Any worker runs any run's workflow code; each agent's steps go to the agent's own queue, which
only workers hosting it poll. A run whose agent no worker hosts waits, and says why.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from temporalio.client import Client

from tests.agents import PAY_SCRIPT, Payments, build_agent
from tests.conftest import running_worker, start_directly
from waypoint._cli.render import status_lines
from waypoint.client import runs, views
from waypoint.protocol import RunInput


async def second_client(client: Client) -> Client:
    """Another connection: temporalio allows one worker per queue and client in a process."""
    config = client.config()
    return await Client.connect(
        client.service_client.config.target_host,
        namespace=client.namespace,
        data_converter=config["data_converter"],
    )


async def test_runs_complete_when_workers_on_one_queue_host_different_agents(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    other = await second_client(client)
    paid = Payments(tmp_path / "payer.db")
    billed = Payments(tmp_path / "biller.db")
    payer = build_agent(paid, PAY_SCRIPT, name="payer")
    biller = build_agent(billed, PAY_SCRIPT, name="biller")
    async with (
        running_worker(client, [payer], task_queue),
        running_worker(other, [biller], task_queue),
    ):
        handles = [
            await runs.start_run(client, agent, f"pay ada 5 ({i})", task_queue=task_queue)
            for i in range(8)
            for agent in ("payer", "biller")
        ]
        results = await asyncio.wait_for(asyncio.gather(*(h.result() for h in handles)), 120)
    assert [r.output for r in results] == ["Paid ada 5."] * 16
    assert [r.state for r in results] == ["done"] * 16
    assert paid.count() == 8 and billed.count() == 8  # each effect once, by its own agent


async def test_run_for_an_agent_no_worker_hosts_waits_until_one_starts(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    billed = Payments(tmp_path / "biller.db")
    payer = build_agent(Payments(tmp_path / "payer.db"), PAY_SCRIPT, name="payer")
    biller = build_agent(billed, PAY_SCRIPT, name="biller")
    async with running_worker(client, [payer], task_queue):
        # Started by Waypoint: the run lives on biller's queue, where nobody polls yet.
        handle = await runs.start_run(
            client, "biller", "pay ada 5", task_queue=task_queue, queue_anyway=True
        )
        view = await views.view(client, handle.id)
        waits = f"no worker on queue {task_queue!r} hosts agent 'biller'"
        assert view.execution == "running" and view.unhosted.startswith(waits)
        assert any(line.startswith(f"waiting  {waits}") for line in status_lines(view))
        # Started on the shared queue by another client: payer's worker runs the workflow
        # code and answers for it, and its steps wait on biller's queue.
        raw = await start_directly(
            client, f"raw-{handle.id}", task_queue, RunInput(agent="biller", task="pay bob 5")
        )
        view = await waiting_for_its_spec(client, raw.id)
        assert view.live is not None
        async with running_worker(await second_client(client), [biller], task_queue):
            results = await asyncio.wait_for(asyncio.gather(handle.result(), raw.result()), 60)
            assert (await views.view(client, handle.id)).unhosted == ""
    assert [(r.output, r.state) for r in results] == [("Paid ada 5.", "done")] * 2
    assert billed.count() == 2


async def waiting_for_its_spec(client: Client, run: str, timeout: float = 20) -> views.RunView:
    """The run once its first step (loading the agent's spec) is scheduled and not yet taken."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        pending = (await client.get_workflow_handle(run).describe()).raw_description
        names = [a.activity_type.name for a in pending.pending_activities]
        if names == ["waypoint.load_spec"]:
            return await views.view(client, run)
        assert loop.time() < deadline, f"{run}: no spec step pending ({names})"
        await asyncio.sleep(0.05)
