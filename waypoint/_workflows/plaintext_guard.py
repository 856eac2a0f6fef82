"""Every update of a run that refuses plain text refuses a message sent unencrypted.

One interceptor for every update's validator, so an update added later is covered too; it runs
only where validators run (never on replay), and a refused update leaves history clean. Signals
are refused where they are decoded (`decisions.decode`), recorded. See
`waypoint._security.plaintext`.
"""

from __future__ import annotations

from temporalio import workflow
from temporalio.exceptions import ApplicationError
from temporalio.worker import (
    HandleUpdateInput,
    Interceptor,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
)

with workflow.unsafe.imports_passed_through():
    from waypoint.protocol import plaintext


def refuses_plaintext(before_spec: bool) -> bool:
    """Whether the current run refuses unencrypted messages.

    Its snapshot says, or before the snapshot is taken this worker's own setting: a validator
    never runs on replay, so it may.
    """
    s = getattr(workflow.instance(), "s", None)
    spec = getattr(s, "spec", None)
    return before_spec if spec is None else bool(getattr(spec, "refuse_plaintext", False))


class _Guard(WorkflowInboundInterceptor):
    before_spec = True
    """This worker's setting, for an update that comes before the run's snapshot."""

    def handle_update_validator(self, input: HandleUpdateInput) -> None:
        refuses = refuses_plaintext(self.before_spec)
        if refuses and any(plaintext.arrived_plain(a) for a in input.args):
            raise ApplicationError(plaintext.REFUSED, type="DecisionRefused", non_retryable=True)
        self.next.handle_update_validator(input)


class PlaintextGuard(Interceptor):
    """Installed by `WaypointPlugin` on every worker it configures; `refuse`: its own setting."""

    def __init__(self, refuse: bool = True) -> None:
        self.guard = type("_Guard", (_Guard,), {"before_spec": refuse})

    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor]:
        """See base class."""
        return self.guard
