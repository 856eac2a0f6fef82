"""A payload a worker cannot decrypt is refused and recorded; it never wedges the run."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from temporalio.api.common.v1 import Payload
from temporalio.client import Client
from temporalio.common import RawValue
from temporalio.testing import WorkflowEnvironment

from tests.agents import PAY_SCRIPT, Payments, build_agent
from tests.conftest import running_worker, wait_for_state
from waypoint.client import runs
from waypoint.client.runs import start_run
from waypoint.errors import DecisionRefusedError
from waypoint.protocol import plaintext
from waypoint.settings import Settings, converter_from_settings

KEY = "k1:" + base64.b64encode(b"\x01" * 32).decode()
NEWER_KEY = "k2:" + base64.b64encode(b"\x02" * 32).decode()


async def keyed_client(env: WorkflowEnvironment, keys: str) -> Client:
    return await Client.connect(
        env.client.service_client.config.target_host,
        data_converter=converter_from_settings(Settings(encryption_keys=keys)),
    )


async def test_forged_encrypted_signal_is_recorded_and_the_run_goes_on(
    env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    client = await keyed_client(env, KEY)
    payments = Payments(tmp_path / "payments.db")
    agent = build_agent(payments, PAY_SCRIPT, approval=True)
    async with running_worker(client, [agent], task_queue):
        handle = await start_run(client, "payer", "pay ada 5", task_queue=task_queue)
        await wait_for_state(client, handle.id, "awaiting_approval")
        # Any client with namespace access: no keys, a payload that only claims to be ciphertext.
        forged = Payload(
            metadata={"encoding": b"binary/encrypted", "encryption-key-id": b"stolen"},
            data=b"\x00" * 40,
        )
        plain = env.client.get_workflow_handle(handle.id)
        await plain.signal("approve", RawValue(forged))
        await plain.signal("correct", RawValue(forged))
        # Not encrypted at all (a protobuf payload): refused before it is decoded.
        await plain.signal("approve", forged)

        status = await runs.status(client, handle.id)  # the run still answers
        while len(status.ignored_signals) < 3:
            status = await runs.status(client, handle.id)
        assert status.state == "awaiting_approval"
        reasons = [(i.signal, i.reason) for i in status.ignored_signals]
        assert reasons[0][0] == "approve" and "key id 'stolen'" in reasons[0][1]
        assert reasons[1][0] == "correct"
        assert reasons[2] == ("approve", f"approve: {plaintext.REFUSED}")
        assert payments.count() == 0

        await runs.approve(client, handle.id, "t2.tool.1.pay", reviewer="grace")
        result = await handle.result()
    assert result.output == "Paid ada 5."
    assert payments.count() == 1
    history = await handle.fetch_history()
    assert not [e for e in history.events if e.HasField("workflow_task_failed_event_attributes")]


async def test_a_cli_key_the_workers_lack_is_refused_clearly(
    env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    """Keys rotated in the wrong order: the client encrypts with k2 before the workers have it."""
    client = await keyed_client(env, KEY)
    rotated_early = await keyed_client(env, f"{NEWER_KEY},{KEY}")
    payments = Payments(tmp_path / "payments.db")
    agent = build_agent(payments, PAY_SCRIPT, approval=True)
    async with running_worker(client, [agent], task_queue):
        handle = await start_run(client, "payer", "pay ada 5", task_queue=task_queue)
        await wait_for_state(client, handle.id, "awaiting_approval")
        with pytest.raises(DecisionRefusedError, match="key id 'k2'.*does not have"):
            await runs.approve(rotated_early, handle.id, "t2.tool.1.pay", reviewer="grace")
        assert (await runs.status(client, handle.id)).state == "awaiting_approval"
        await runs.approve(client, handle.id, "t2.tool.1.pay", reviewer="grace")
        assert (await handle.result()).output == "Paid ada 5."
    assert payments.count() == 1
