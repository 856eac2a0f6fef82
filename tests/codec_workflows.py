"""A tiny workflow that puts canary secrets in an activity result and in a failure message."""

from __future__ import annotations

from datetime import timedelta

from temporalio import activity, workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ApplicationError

SECRET_RESULT = "canary-SECRET-1234"
SECRET_FAILURE = "canary-FAILURE-5678"


@activity.defn(name="codec_test.reveal_secret")
async def reveal_secret() -> str:
    """Return the first canary, which must reach history only encrypted."""
    return SECRET_RESULT


@activity.defn(name="codec_test.fail_with_secret")
async def fail_with_secret() -> None:
    """Fail with the second canary in the message, which must reach history only encrypted."""
    raise ApplicationError(f"vendor lookup failed for {SECRET_FAILURE}", non_retryable=True)


@workflow.defn(name="codec_test.Canary")
class CanaryWorkflow:
    """Return the secret activity's result, or fail with the failing activity's error."""

    @workflow.run
    async def run(self, fail: bool) -> str:
        """Run one of the two activities."""
        timeout = timedelta(seconds=10)
        if fail:
            await workflow.execute_activity(
                fail_with_secret,
                start_to_close_timeout=timeout,
                retry_policy=RetryPolicy(maximum_attempts=1),
            )
        return await workflow.execute_activity(reveal_secret, start_to_close_timeout=timeout)


@workflow.defn(name="codec_test.TaskFailing")
class TaskFailingWorkflow:
    """Fail its workflow task on every attempt, with the canary in the message."""

    @workflow.run
    async def run(self) -> None:
        """Raise a plain error: Temporal retries the task, and the run never moves on."""
        raise RuntimeError(f"bug in workflow code near {SECRET_FAILURE}")
