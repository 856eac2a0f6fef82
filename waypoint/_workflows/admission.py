"""Whether a decision may apply: once by its id, signed where the agent asks. Deterministic.

Every verb that decides something (approve, reject, resolve, set_policy, the simple verbs) is
admitted here before it applies, and a refusal is recorded, never raised.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

from pydantic import BaseModel
from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

from waypoint._workflows import decisions

with workflow.unsafe.imports_passed_through():
    from waypoint.protocol import AgentState
    from waypoint.protocol.signatures import DecisionCheck, DecisionVerdict, fields


class Admission:
    """Admits decisions for `Gates`, which records the refusals (`ignore`)."""

    s: AgentState

    def ignore(self, signal: str, step_id: str, reason: str) -> None:  # noqa: D102
        raise NotImplementedError

    async def admit(
        self, signal: str, step_id: str, payload: BaseModel, check: Callable[[], str]
    ) -> str | None:
        """None when the decision may apply; else '' for a repeat, or why it is refused.

        Either way the outcome is recorded. `check` is asked after the signature is verified,
        so it sees the run as it is when the decision applies.
        """
        if self.repeated(signal, step_id, payload):
            return ""
        why = await self.signature_refusal(signal, step_id, payload)
        if not why and self.repeated(signal, step_id, payload):  # arrived while verifying
            return ""
        why = why or check()
        if why:
            self.ignore(signal, step_id, why)
            return why
        return None

    def repeated(self, signal: str, step_id: str, payload: BaseModel) -> bool:
        """Whether the decision's id was applied already: a no-op, recorded as a duplicate."""
        decision_id = str(getattr(payload, "decision_id", ""))
        if not decisions.seen(self.s, decision_id):
            return False
        first = self.s.decision_ids[decision_id]
        why = f"duplicate: decision {decision_id} was already applied ({first}); nothing changed"
        self.ignore(signal, step_id, why)
        return True

    def applied(self, decision_id: str, step_id: str) -> None:
        """Remember an applied decision's id, so a second arrival of it is a no-op."""
        if decision_id:
            self.s.decision_ids[decision_id] = step_id

    def signed_only(self) -> bool:
        """Whether this run accepts signed decisions only (`Agent(signed_decisions=True)`)."""
        spec = self.s.spec
        return spec is not None and spec.signed_decisions

    async def signature_refusal(self, kind: str, step_id: str, payload: BaseModel) -> str:
        """Why the decision's signature does not hold, or ''.

        Checked on a worker, against the reviewers' public keys it holds, never a payload's.
        """
        if not self.signed_only():
            return ""
        signature = getattr(payload, "signature", None)
        if signature is None:
            return (
                f"unsigned {kind}: this agent accepts signed decisions only. Sign with the "
                "reviewer's key: set WAYPOINT_DECISION_KEY for `waypoint` (see `waypoint "
                "decision-key`), or pass signing_key= to waypoint.client.decisions"
            )
        assert self.s.spec is not None  # signed_only() says there is one
        check = DecisionCheck(
            kind=kind,
            fields=fields(payload),
            signature=signature,
            chain=workflow.info().first_execution_run_id,
            max_age_seconds=self.s.spec.decision_max_age.total_seconds(),
        )
        try:
            verdict = await workflow.execute_activity(
                "waypoint.verify_decision",
                check,
                result_type=DecisionVerdict,
                start_to_close_timeout=timedelta(seconds=30),
                heartbeat_timeout=self.s.input.options.tool_heartbeat_timeout,
                retry_policy=RetryPolicy(maximum_attempts=3),
                summary=f"verify {kind} {step_id}".strip(),
            )
        except ActivityError as err:
            cause = getattr(err.cause, "message", "") or str(err.cause or err)
            return f"the signature could not be checked ({cause}); send the decision again"
        return verdict.reason if not verdict.valid else ""
