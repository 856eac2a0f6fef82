"""A start names what it cannot do: an agent no polling worker hosts is refused (issue 29.7).

A misspelt name used to start a run that waited for ever behind a warning. Now `start_run`
raises `AgentNotHostedError` naming the agents hosted on the queue, and `waypoint start` says
it in one line and exits 1; `queue_anyway=True` / `--queue-anyway` starts it all the same (a
worker still being deployed), and the run waits and `status` says why, as before.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from temporalio.client import Client

from tests.agents import PAY_SCRIPT, Payments, build_agent
from tests.conftest import running_worker, wait_for_visibility
from tests.test_agent_queues import second_client
from tests.test_cli import cli_env, waypoint  # noqa: F401 - the fixture is used by name
from tests.test_operator_truth import (
    an_unhosted_agent_queued_anyway_waits_until_terminated,
    cli,
    one_line_error,
)
from waypoint.client import runs, views
from waypoint.errors import AgentNotHostedError, RunNotFoundError
from waypoint.protocol.queues import agent_queue


def ran_on(task_queue: str, *agents: str) -> str:
    """Visibility's view of this test's completed runs of `agents`."""
    queues = ", ".join(f"'{agent_queue(task_queue, a)}'" for a in agents)
    return f"TaskQueue IN ({queues}) AND ExecutionStatus = 'Completed'"


async def test_start_run_refuses_an_agent_no_worker_hosts_and_names_those_hosted(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    payer = build_agent(Payments(tmp_path / "payer.db"), PAY_SCRIPT, name="payer")
    biller = build_agent(Payments(tmp_path / "biller.db"), PAY_SCRIPT, name="biller")
    async with running_worker(client, [payer, biller], task_queue):
        for name in ("payer", "biller"):
            await (await runs.start_run(client, name, "pay ada 5", task_queue=task_queue)).result()
        await wait_for_visibility(client, ran_on(task_queue, "payer", "biller"), 2)

        began = asyncio.get_running_loop().time()
        with pytest.raises(AgentNotHostedError) as refused:
            await runs.start_run(
                client, "payr", "pay ada 5", task_queue=task_queue, workflow_id=f"typo-{task_queue}"
            )
        assert asyncio.get_running_loop().time() - began < 10  # a grace, not the worker wait
        err = refused.value
        assert (err.agent, err.task_queue, err.hosted) == ("payr", task_queue, ["biller", "payer"])
        said = str(err)
        assert said.startswith(f"no worker on queue {task_queue!r} hosts agent 'payr'"), said
        assert "(hosted there: biller, payer)" in said and "queue_anyway=True" in said, said
        with pytest.raises(RunNotFoundError):  # refused before anything started
            await views.describe(client, f"typo-{task_queue}")

        # A worker still being deployed: queued on purpose, it waits and says why, as before.
        handle = await runs.start_run(
            client, "clerk", "pay ada 5", task_queue=task_queue, queue_anyway=True
        )
        view = await views.view(client, handle.id, ask_worker=False)
        assert view.execution == "running"
        assert view.unhosted.startswith(f"no worker on queue {task_queue!r} hosts agent 'clerk'")
        clerk = build_agent(Payments(tmp_path / "clerk.db"), PAY_SCRIPT, name="clerk")
        async with running_worker(await second_client(client), [clerk], task_queue):
            assert (await asyncio.wait_for(handle.result(), 60)).output == "Paid ada 5."


async def test_start_run_with_no_worker_at_all_waits_for_one_then_refuses(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    with pytest.raises(AgentNotHostedError, match=f"no worker polls queue {task_queue!r}") as err:
        await runs.start_run(client, "payer", "pay ada 5", task_queue=task_queue, worker_wait=0)
    assert err.value.hosted == [] and "--queue-anyway (queue_anyway=True)" in str(err.value)

    agent = build_agent(Payments(tmp_path / "p.db"), PAY_SCRIPT)

    async def worker_comes_up() -> None:  # `waypoint worker & waypoint start ...`
        await asyncio.sleep(1)
        async with running_worker(client, [agent], task_queue):
            await done.wait()

    done = asyncio.Event()
    beside = asyncio.create_task(worker_comes_up())
    try:
        handle = await runs.start_run(client, "payer", "pay ada 5", task_queue=task_queue)
        assert (await asyncio.wait_for(handle.result(), 60)).output == "Paid ada 5."
    finally:
        done.set()
        await beside


async def test_waypoint_start_refuses_an_unhosted_agent_in_one_line_unless_queue_anyway(
    client: Client,
    task_queue: str,
    tmp_path: Path,
    cli_env: dict[str, str],  # noqa: F811
) -> None:
    agent = build_agent(Payments(Path(cli_env["WAYPOINT_TEST_PAYMENTS"])), PAY_SCRIPT)
    async with running_worker(client, [agent], task_queue):
        await (await runs.start_run(client, "payer", "pay ada 5", task_queue=task_queue)).result()
        await wait_for_visibility(client, ran_on(task_queue, "payer"), 1)

        refused = await cli(cli_env, "start", "nosuchagent", "hello")
        one_line_error(
            refused,
            f"no worker on queue {task_queue!r} hosts agent 'nosuchagent' (hosted there: payer)",
            "a misspelt name?",
            "--queue-anyway",
        )
        assert "started" not in refused.stdout, refused.stdout

        await an_unhosted_agent_queued_anyway_waits_until_terminated(client, cli_env, task_queue)

        hosted = await cli(cli_env, "start", "payer", "pay ada 5")
        assert hosted.returncode == 0 and "started" in hosted.stdout, hosted.stderr
        assert "warning" not in hosted.stderr, hosted.stderr


async def test_waypoint_start_with_no_worker_refuses_after_check_seconds(
    task_queue: str,
    cli_env: dict[str, str],  # noqa: F811
) -> None:
    refused = await cli(cli_env, "start", "payer", "hello", "--check", "0")
    one_line_error(refused, f"no worker polls queue {task_queue!r}", "--queue-anyway")
