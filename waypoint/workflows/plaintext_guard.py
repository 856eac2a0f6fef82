"""Every update of a run that refuses plain text refuses a message sent unencrypted.

One interceptor for every update's validator, so an update added later is covered too; it runs
only where validators run (never on replay), and a refused update leaves history clean. Signals
are refused where they are decoded (`decisions.decode`), recorded. See `waypoint.plaintext`.
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


def refuses_plaintext() -> bool:
    """Whether the current run's snapshot says it refuses unencrypted messages."""
    spec = getattr(getattr(workflow.instance(), "s", None), "spec", None)
    return bool(getattr(spec, "refuse_plaintext", False))


class _Guard(WorkflowInboundInterceptor):
    def handle_update_validator(self, input: HandleUpdateInput) -> None:
        if refuses_plaintext() and any(plaintext.arrived_plain(a) for a in input.args):
            raise ApplicationError(plaintext.REFUSED, type="DecisionRefused", non_retryable=True)
        self.next.handle_update_validator(input)


class PlaintextGuard(Interceptor):
    """Installed by `build_worker` on every worker it makes."""

    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor]:
        """See base class."""
        return _Guard
