"""With encryption on, a run refuses what a client without the keys sends it (issue 34.6).

Any client with namespace access could approve a payment with `temporal workflow signal` in
plain text, though every payload of the run was encrypted: the codec let plain payloads through.
Now a run an encrypting worker starts refuses them, a signal recorded, an update rejected with
nothing in history, and the history replays the same way. `refuse_plaintext=False` (or
`WAYPOINT_REFUSE_PLAINTEXT=0`) accepts them.
"""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment

from tests.agents import PAY_SCRIPT, Payments, build_agent
from tests.conftest import running_worker, the_pending_approval
from tests.support.clients import default_store_client
from tests.support.payer import open_payer
from tests.support.replay import assert_replays
from waypoint.client import decisions, runs
from waypoint.protocol import ApprovalDecision, plaintext
from waypoint.protocol.policy import ApprovalPolicy, PolicyChange
from waypoint.stores.payloads import data_converter

KEYS = "k1:" + base64.b64encode(bytes(range(32))).decode()


def clients(client: Client) -> tuple[Client, Client]:
    """One client holding the keys, and one on the same connection without them."""
    config = client.config()
    sealed = Client(**{**config, "data_converter": data_converter(None, encryption_keys=KEYS)})
    plain = Client(**{**config, "data_converter": pydantic_data_converter})
    return sealed, plain


async def test_an_unencrypted_approval_is_refused_by_signal_and_update_and_replays(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    sealed, plain = clients(client)
    opened = open_payer(
        sealed, task_queue, tmp_path / "p.db", approval=True, until="awaiting_approval"
    )
    async with opened as run:
        handle, pending, payments = run.handle, run.pending, run.payments
        forged = ApprovalDecision(
            step_id=pending.step_id, reviewer="mallory", arguments_hash=pending.arguments_hash
        )
        await plain.get_workflow_handle(handle.id).signal("approve", forged)
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await plain.get_workflow_handle(handle.id).execute_update("approve", forged)
        cause = refused.value.cause
        assert isinstance(cause, ApplicationError) and cause.failure is not None
        said = await sealed.data_converter.decode_failure(cause.failure)
        assert plaintext.REFUSED in str(said)
        status = await runs.status(sealed, handle.id)
        assert status.state == "awaiting_approval" and payments.count() == 0
        (ignored,) = [i for i in status.ignored_signals if i.signal == "approve"]
        assert plaintext.REFUSED in ignored.reason
        await decisions.approve(sealed, handle.id, pending.step_id, reviewer="grace")
        result = await asyncio.wait_for(handle.result(), 60)
    assert result.state == "done" and payments.count() == 1
    await assert_replays(handle, sealed.data_converter)


async def test_a_worker_told_to_accept_plain_text_takes_it(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    sealed, plain = clients(client)
    accepting = {"refuse_plaintext": False}
    db = tmp_path / "p.db"
    async with open_payer(
        sealed, task_queue, db, approval=True, worker=accepting, until="awaiting_approval"
    ) as run:
        decision = ApprovalDecision(
            step_id=run.pending.step_id, reviewer="ops", arguments_hash=run.pending.arguments_hash
        )
        await plain.get_workflow_handle(run.handle.id).signal("approve", decision)
        result = await asyncio.wait_for(run.handle.result(), 60)
    assert result.state == "done" and run.payments.count() == 1


async def test_an_unencrypted_policy_sent_before_the_spec_loads_is_refused(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """Sent while no worker is up, it reached the run before its snapshot said to refuse it."""
    sealed, plain = clients(client)
    agent = build_agent(Payments(tmp_path / "p.db"), PAY_SCRIPT, approval=True)
    handle = await runs.start_run(sealed, "payer", "pay", task_queue=task_queue, queue_anyway=True)
    forged = PolicyChange(policy=ApprovalPolicy(default="allow"), reviewer="mallory")
    await plain.get_workflow_handle(handle.id).signal("set_policy", forged)
    async with running_worker(sealed, [agent], task_queue):
        await the_pending_approval(sealed, handle.id)
        shown = await decisions.show_policy(sealed, handle.id)
        status = await runs.status(sealed, handle.id)
    assert shown.source != "changed" and shown.changes == 0
    (ignored,) = [i for i in status.ignored_signals if i.signal == "set_policy"]
    assert plaintext.REFUSED in ignored.reason


async def test_a_large_decision_through_the_sealed_store_is_not_taken_for_plain_text(
    env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    """The store keeps payloads past its threshold sealed; the codec sees them in the clear."""
    store = tmp_path / "payloads"
    sealed = await default_store_client(env, store, KEYS)
    db = tmp_path / "p.db"
    async with open_payer(sealed, task_queue, db, approval=True, until="awaiting_approval") as run:
        handle, pending, payments = run.handle, run.pending, run.payments
        decision = ApprovalDecision(
            step_id=pending.step_id,
            reviewer="grace",
            reason="checked " * 40_000,  # past the store's threshold
            arguments_hash=pending.arguments_hash,
        )
        await handle.signal("approve", decision)
        result = await asyncio.wait_for(handle.result(), 60)
    assert result.state == "done" and payments.count() == 1
