"""Worker versioning: a run stays on the build it started on; new runs go to the current build.

Each build's scripted model signs its last reply, so the answer says which build ran the
run's last steps. The dev server needs no extra flag for worker deployments (server 1.32).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid
from dataclasses import replace
from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowHandle

from tests.agents import PAY_SCRIPT, Payments, build_agent
from tests.conftest import running_worker, wait_for_state
from waypoint._agent import Agent
from waypoint._cli.render import status_lines
from waypoint._operations import deploys
from waypoint._providers.scripted import ScriptedModel
from waypoint.client import runs, views
from waypoint.errors import DeployError
from waypoint.protocol import RunResult
from waypoint.testing import reply, text

PAY = "t2.tool.1.pay"


@pytest.fixture
def dep() -> str:
    """A worker deployment of the test's own."""
    return f"wp{uuid.uuid4().hex[:8]}"


def signed(build: str) -> ScriptedModel:
    """The payer's script, its final words naming the build that said them."""
    return ScriptedModel({"payer": [*PAY_SCRIPT[:2], reply(text(f"Paid ada 5 on {build}."))]})


def versioned(deployment: str, build: str) -> dict:
    """Worker options for one build of the deployment, with that build's signed script."""
    return {
        "deployment_config": deploys.deployment_config(deployment, build),
        "scripted": signed(build),
    }


async def make_current(client: Client, deployment: str, build: str, timeout: float = 90) -> None:
    """Set the current build once the server has seen that build's worker poll.

    Generous: on a busy CI machine the server's deployment workflows took over 30 s to carry a
    change to every task queue.
    """
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        try:
            return await deploys.set_current(client, deployment, build, timeout=timeout)
        except DeployError:
            if asyncio.get_running_loop().time() > deadline:
                raise
            await asyncio.sleep(0.1)


async def park(
    client: Client, task_queue: str, agent: str = "payer"
) -> WorkflowHandle[object, RunResult]:
    """Start a payment run and wait until it waits for approval."""
    handle = await runs.start_run(client, agent, "pay ada 5", task_queue=task_queue)
    await wait_for_state(client, handle.id, "awaiting_approval")
    return handle


async def approve(client: Client, run: str) -> None:
    await runs.approve(client, run, PAY, reviewer="grace", timeout=2)


def payer(tmp_path: Path, **options: object) -> tuple[Agent, Payments]:
    payments = Payments(tmp_path / "payments.db")
    agent = build_agent(payments, PAY_SCRIPT, approval=True)
    for key, value in options.items():
        setattr(agent, key, value)
    return agent, payments


async def test_pinned_run_finishes_on_its_build_while_new_runs_go_to_the_current_one(
    client: Client, task_queue: str, tmp_path: Path, dep: str
) -> None:
    agent, payments = payer(tmp_path)
    async with running_worker(client, [agent], task_queue, **versioned(dep, "v1")):
        await make_current(client, dep, "v1")
        old = await park(client, task_queue)
        assert (await views.view(client, old.id)).version == f"pinned to {dep}.v1"
        async with running_worker(client, [agent], task_queue, **versioned(dep, "v2")):
            await make_current(client, dep, "v2")
            assert (await deploys.routing(client, dep)).current == "v2"
            new = await park(client, task_queue)
            assert (await views.view(client, new.id)).version == f"pinned to {dep}.v2"
            await approve(client, old.id)
            await approve(client, new.id)
            assert (await old.result()).output == "Paid ada 5 on v1."
            assert (await new.result()).output == "Paid ada 5 on v2."
    assert payments.count() == 2


async def test_pinned_run_waits_for_its_build_and_status_names_it(
    client: Client, task_queue: str, tmp_path: Path, dep: str
) -> None:
    agent, payments = payer(tmp_path)
    async with running_worker(client, [agent], task_queue, **versioned(dep, "v2")):
        async with running_worker(client, [agent], task_queue, **versioned(dep, "v1")):
            await make_current(client, dep, "v1")
            handle = await park(client, task_queue)
            await make_current(client, dep, "v2")
        # Every v1 worker is gone; the approval lands as a signal the v2 worker must not run.
        await approve(client, handle.id)
        view = await views.view(client, handle.id, timeout=1)
        assert view.live is None and view.state == "awaiting_approval"
        waits = f"pinned to {dep}.v1 (current: v2): only a worker of build v1 continues it"
        assert view.version == waits
        assert f"version  {waits}" in status_lines(view)
        assert payments.count() == 0
        async with running_worker(client, [agent], task_queue, **versioned(dep, "v1")):
            assert (await handle.result()).output == "Paid ada 5 on v1."
    assert payments.count() == 1


async def test_auto_upgrade_agent_moves_to_the_current_build(
    client: Client, task_queue: str, tmp_path: Path, dep: str
) -> None:
    agent, payments = payer(tmp_path, versioning="auto_upgrade")
    async with running_worker(client, [agent], task_queue, **versioned(dep, "v1")):
        await make_current(client, dep, "v1")
        handle = await park(client, task_queue)
        assert (await views.view(client, handle.id)).version.startswith("auto-upgrade, on")
        async with running_worker(client, [agent], task_queue, **versioned(dep, "v2")):
            await make_current(client, dep, "v2")
            # set_current returns only once every task queue routes by it: no race left here.
            now = await deploys.routing(client, dep)
            assert now.current == "v2" and await deploys.queues_route(client, now)
            assert not await deploys.queues_route(client, replace(now, current="v1"))
            await approve(client, handle.id)
            assert (await handle.result()).output == "Paid ada 5 on v2."
    assert payments.count() == 1


async def test_ramp_and_half_configured_worker_are_refused_with_a_hint(
    client: Client, dep: str
) -> None:
    with pytest.raises(DeployError, match="WAYPOINT_BUILD_ID"):
        deploys.deployment_config(dep, None)
    assert deploys.deployment_config(None, None) is None
    with pytest.raises(DeployError, match="between 0 and 100"):
        await deploys.ramp(client, dep, "v2", 150)
    with pytest.raises(DeployError, match="has polled yet"):
        await deploys.set_current(client, dep, "v2")


async def waypoint_cli(client: Client, *args: str) -> tuple[int, str]:
    """Run the `waypoint` CLI against the session's server without blocking the workers."""
    env = {
        **os.environ,
        "TEMPORAL_ADDRESS": client.service_client.config.target_host,
        "TEMPORAL_NAMESPACE": client.namespace,
        "PYTHONPATH": str(Path(__file__).parent.parent),
    }
    proc = await asyncio.create_subprocess_exec(
        str(Path(sys.executable).parent / "waypoint"),
        *args,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode()


async def test_deploy_commands_ramp_then_promote_a_build(
    client: Client, task_queue: str, tmp_path: Path, dep: str
) -> None:
    agent, _ = payer(tmp_path)

    async def deploy(*args: str) -> str:
        code, said = await waypoint_cli(client, "deploy", *args, "--deployment", dep)
        assert code == 0, said
        return said

    async with running_worker(client, [agent], task_queue, **versioned(dep, "v1")):
        await make_current(client, dep, "v1")
        async with running_worker(client, [agent], task_queue, **versioned(dep, "v2")):
            deadline = asyncio.get_running_loop().time() + 20
            while "v2" not in (await deploys.routing(client, dep)).builds:
                assert asyncio.get_running_loop().time() < deadline, "v2 never registered"
                await asyncio.sleep(0.1)
            assert "25% of new runs go to v2" in await deploy("ramp", "v2", "25")
            shown = json.loads(await deploy("show", "--json"))
            assert (shown["current"], shown["ramping"], shown["ramp_percent"]) == ("v1", "v2", 25)
            assert shown["builds"] == ["v1", "v2"]
            assert "new runs go to v2" in await deploy("set-current", "v2")
            routing = await deploys.routing(client, dep)
            assert (routing.current, routing.ramping) == ("v2", "")


async def test_a_routing_change_is_sent_again_while_the_server_is_only_busy() -> None:
    """A loaded server may cancel the RPC ("operation was canceled"); the change is idempotent."""
    from temporalio.api.workflowservice.v1 import SetWorkerDeploymentCurrentVersionRequest
    from temporalio.service import RPCError, RPCStatusCode

    from waypoint._operations.deploys import _send

    answers = [RPCStatusCode.CANCELLED, RPCStatusCode.UNAVAILABLE, None]
    sent = []

    async def server(request: SetWorkerDeploymentCurrentVersionRequest) -> None:
        sent.append(request.build_id)
        status = answers.pop(0)
        if status is not None:
            raise RPCError("operation was canceled", status, b"")

    request = SetWorkerDeploymentCurrentVersionRequest(deployment_name="d", build_id="v2")
    await _send(server, request, timeout=10)
    assert sent == ["v2", "v2", "v2"]

    async def refuses(request: SetWorkerDeploymentCurrentVersionRequest) -> None:
        raise RPCError("no such build", RPCStatusCode.NOT_FOUND, b"")

    with pytest.raises(DeployError, match="has polled yet"):
        await _send(refuses, request, timeout=10)


async def test_a_stuck_propagating_flag_yields_to_task_queues_that_route_by_the_change(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The server can leave the deployment's flag set for good (temporalio/temporal#11842)."""
    stuck = deploys.Routing(deployment="d", current="v2", propagating=True)
    queues = iter([False, False, True, False, *[True] * 100])
    asked = []

    async def routing(client: object, deployment: str) -> deploys.Routing:
        return stuck

    async def queues_route(client: object, by: deploys.Routing) -> bool:
        asked.append(by.current)
        return next(queues)

    monkeypatch.setattr(deploys, "routing", routing)
    monkeypatch.setattr(deploys, "queues_route", queues_route)
    monkeypatch.setattr(deploys, "QUEUES_SETTLE", 0.5)
    await deploys._propagated(None, "d", timeout=10)  # type: ignore[arg-type]
    assert 4 + 2 <= len(asked) < 20  # the queue that lost the change restarted the clock

    monkeypatch.setattr(deploys, "queues_route", lambda client, by: asyncio.sleep(0, False))
    with pytest.raises(DeployError, match="not all picked it up after 1s"):
        await deploys._propagated(None, "d", timeout=1)  # type: ignore[arg-type]
