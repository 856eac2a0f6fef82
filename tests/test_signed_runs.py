"""A signed decision belongs to one run, and to a recent moment.

What a reviewer signs names the workflow id and the chain's first execution run id, which a
rerun under the same id does not share; a worker refuses a signature older than the agent's
`decision_max_age`. Each refusal is recorded and nothing is applied.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from temporalio.client import Client

from tests.agents import PAY_SCRIPT, Payments, build_agent
from tests.conftest import running_worker, wait_for_state
from tests.test_decisions import until_ignored
from waypoint._security.signing import load_private_key, load_public_keys, new_key, sign
from waypoint.client import runs, verbs
from waypoint.protocol import ApprovalDecision

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import (
        Ed25519PrivateKey,
        Ed25519PublicKey,
    )

STEP = "t2.tool.1.pay"


def signed_payer(payments: Payments):  # type: ignore[no-untyped-def]
    agent = build_agent(payments, PAY_SCRIPT, approval=True)
    agent.signed_decisions = True
    agent.decision_max_age = timedelta(minutes=10)
    agent.approval_hash = "optional"
    return agent


def grace_signs() -> tuple[Ed25519PrivateKey, dict[str, Ed25519PublicKey]]:
    """A fresh key for grace: what she signs with, and what a worker checks her by."""
    private, public = new_key()
    return load_private_key(private), load_public_keys(f"grace:{public}")


async def test_a_signed_decision_copied_from_one_run_is_refused_on_a_rerun_of_its_id(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    payments = Payments(tmp_path / "p.db")
    grace, keys = grace_signs()
    run = f"rerun-{task_queue}"
    async with running_worker(client, [signed_payer(payments)], task_queue, decision_keys=keys):
        first = await runs.start_run(
            client, "payer", "pay ada", task_queue=task_queue, workflow_id=run
        )
        await wait_for_state(client, run, "awaiting_approval")
        chain = await verbs.chain_id(client, run)
        # An approval that names no arguments hash (the agent's approval_hash="optional").
        bare = ApprovalDecision(step_id=STEP, reviewer="grace", decision_id="a1")
        approve = sign(grace, run, chain, "approve", bare)
        await first.signal("approve", approve)
        await first.result()
        assert payments.count() == 1
        # The same signed bytes, copied from run 1's history, sent to a rerun of the id.
        second = await runs.start_run(
            client, "payer", "pay ada", task_queue=task_queue, workflow_id=run, rerun=True
        )
        await wait_for_state(client, run, "awaiting_approval")
        assert await verbs.chain_id(client, run) != chain
        await second.signal("approve", approve)
        status = await until_ignored(client, run, 1)
        assert status.state == "awaiting_approval" and payments.count() == 1
        (refused,) = status.ignored_signals
        assert refused.signal == "approve"
        assert "another run under the same id" in refused.reason
        await second.cancel()


async def test_a_signature_older_than_the_agent_allows_is_refused(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    payments = Payments(tmp_path / "p.db")
    grace, keys = grace_signs()
    async with running_worker(client, [signed_payer(payments)], task_queue, decision_keys=keys):
        handle = await runs.start_run(client, "payer", "pay ada", task_queue=task_queue)
        status = await wait_for_state(client, handle.id, "awaiting_approval")
        decision = ApprovalDecision(
            step_id=STEP,
            reviewer="grace",
            arguments_hash=status.pending_approvals[0].arguments_hash,
            decision_id="old",
        )
        chain = await verbs.chain_id(client, handle.id)
        long_ago = datetime.now(UTC) - timedelta(hours=1)
        await handle.signal("approve", sign(grace, handle.id, chain, "approve", decision, long_ago))
        ahead = datetime.now(UTC) + timedelta(hours=1)
        late = decision.model_copy(update={"decision_id": "ahead"})
        await handle.signal("approve", sign(grace, handle.id, chain, "approve", late, ahead))
        status = await until_ignored(client, handle.id, 2)
        assert status.state == "awaiting_approval" and payments.count() == 0
        reasons = [i.reason for i in status.ignored_signals]
        assert "longer than this agent accepts (600s" in reasons[0], reasons
        assert "in the future of this worker's clock" in reasons[1], reasons
        await runs.approve(client, handle.id, STEP, reviewer="grace", signing_key=grace)
        await handle.result()
    assert payments.count() == 1
