"""The run's backoff: the one retry policy every activity it schedules takes, but for its cap."""

from __future__ import annotations

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from waypoint.protocol import StepOptions


def backoff(options: StepOptions, attempts: int, *never: str) -> RetryPolicy:
    """The run's retry intervals with a step's attempt cap; `never`: error types not retried."""
    return RetryPolicy(
        initial_interval=options.retry_initial_interval,
        maximum_interval=options.retry_max_interval,
        maximum_attempts=attempts,
        non_retryable_error_types=list(never) or None,
    )
