"""The run's queries: what a client reads of it, answered from its state, never changing it."""

from __future__ import annotations

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from waypoint.protocol import AgentState, Limits, PendingApproval, RunStatus, StepRecord
    from waypoint.protocol.policy import PolicyView
    from waypoint.protocol.vocabulary import CANNOT_FORK

from waypoint._workflows import operator, policy, visibility


class Queries:
    """The queries of `AgentWorkflow`, over its state `s`."""

    s: AgentState

    @workflow.query(name="status")
    def status(self) -> RunStatus:
        """The run at a glance."""
        return visibility.status(self.s)

    @workflow.query(name="ledger")
    def ledger(self) -> list[StepRecord]:
        """Every step so far, in order."""
        return self.s.ledger

    @workflow.query(name="limits")
    def limits(self) -> Limits:
        """The limits in force, so an operator can raise one and keep the others."""
        return self.s.limits or Limits()

    @workflow.query(name="state")
    def state(self) -> AgentState:
        """Everything the run holds: spec, transcript, ledger, waits, counters."""
        return self.s

    @workflow.query(name="fork_state")
    def fork_state(self, after_turn: int) -> AgentState:
        """The state a fork after `after_turn` starts from (see `waypoint fork`)."""
        try:
            return operator.fork_state(self.s, after_turn)
        except ValueError as err:
            raise ApplicationError(str(err), type=CANNOT_FORK, non_retryable=True) from err

    @workflow.query(name="pending_approvals")
    def pending_approvals(self) -> list[PendingApproval]:
        """Tool calls waiting for a person."""
        return [p for k, p in self.s.pending.items() if k not in self.s.decisions]

    @workflow.query(name="policy")
    def policy(self) -> PolicyView:
        """The policy in force, whether it was changed, and the approvals remembered."""
        return policy.view(self.s)
