"""A failed Messages API call, mapped to an `ApplicationError` that tells Temporal what to do.

The SDK never retries (`max_retries=0`); this one function decides: 400/401/403/404/422 are not
retried, 408/409/429/5xx/529 are, after the delay the API asked for. A transcript that no
longer fits the model's window is its own type, `ContextWindowExceeded`, so the workflow can
compact it instead of failing; any other 400 or 422 is `InvalidRequest`: the same request
fails the same way however often it is sent, so the workflow parks the run in
`request_invalid` rather than as an outage. Type names are stable: the workflow matches on them.
"""

from __future__ import annotations

import re
from datetime import timedelta

import anthropic
import httpx2
from temporalio.exceptions import ApplicationError

from waypoint.protocol.vocabulary import (
    API_ERROR,
    AUTH_ERROR,
    CONTEXT_WINDOW_EXCEEDED,
    INVALID_REQUEST,
)

TIMEOUT_ERROR = "AnthropicTimeoutError"
CONNECTION_ERROR = "AnthropicConnectionError"
_INVALID_STATUS = frozenset({400, 422})

_HINTS: dict[int, str] = {
    400: "The request is invalid: check the model id, max_tokens and the transcript.",
    401: "Check ANTHROPIC_API_KEY (or ANTHROPIC_AUTH_TOKEN, or the Bedrock/Vertex credentials "
    "when WAYPOINT_CLAUDE is set) in the worker's environment.",
    402: "Check the billing and credit balance of the API key's organization.",
    403: "The API key may not use this model or resource: check its workspace permissions.",
    404: "Check the model id and ANTHROPIC_BASE_URL.",
    413: "The request is too large: shorten the transcript or the tool results.",
    422: "The request is invalid: check the tool schemas and the transcript.",
    429: "Rate limited; Temporal retries the call.",
    529: "Anthropic is overloaded; Temporal retries the call.",
}
_RETRYABLE_STATUS = frozenset({408, 409, 429})

# An error event inside a 200 stream has no status of its own; its type tells which it means.
_STATUS_OF_ERROR_TYPE: dict[str, int] = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "billing_error": 402,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "timeout_error": 504,
    "api_error": 500,
    "overloaded_error": 529,
}

_CLOUD_CREDENTIAL_ERRORS = frozenset(
    {"DefaultCredentialsError", "NoCredentialsError", "PartialCredentialsError"}
)
_CLOUD_SETUP = re.compile(
    r"Could not resolve AWS credentials|No project_id was given|Could not resolve API token"
)

_CONTEXT_OVERFLOW = re.compile(
    r"prompt is too long"
    r"|exceeds? (?:the )?(?:model'?s? )?(?:maximum )?context(?: window| length| limit)"
    r"|context (?:window|limit|length) (?:was |is |has been )?exceeded"
    r"|input length and `?max_tokens`? exceed context limit",
    re.IGNORECASE,
)


def to_application_error(err: Exception, model: str | None = None) -> ApplicationError:
    """Map a failed Messages API call to an error that tells Temporal whether to retry.

    Args:
        err: What the SDK (or its transport) raised.
        model: The model id the call named, so a 404 can say which id is unknown.
    """
    if isinstance(err, ApplicationError):
        return err
    if isinstance(err, anthropic.APIStatusError):
        return _status_error(err, model)
    # A stream that stalls or drops mid-answer raises the transport's own errors, not the SDK's.
    if isinstance(err, anthropic.APITimeoutError | httpx2.TimeoutException):
        return ApplicationError(
            f"Anthropic API call timed out: {err}. Temporal retries the call "
            "(WAYPOINT_MODEL_TIMEOUT sets the client's timeout).",
            type=TIMEOUT_ERROR,
        )
    if isinstance(err, anthropic.APIConnectionError | httpx2.TransportError):
        return ApplicationError(
            f"Could not reach the Anthropic API: {err} (cause: {err.__cause__!r}). "
            "Check the network and ANTHROPIC_BASE_URL; Temporal retries the call.",
            type=CONNECTION_ERROR,
        )
    if isinstance(err, anthropic.CredentialsError) or (
        isinstance(err, TypeError) and "authentication method" in str(err)
    ):
        return ApplicationError(
            f"No Anthropic credentials: {err}. Set ANTHROPIC_API_KEY or ANTHROPIC_AUTH_TOKEN "
            "in the worker's environment.",
            type=AUTH_ERROR,
            non_retryable=True,
        )
    if _is_cloud_credentials_error(err):
        return ApplicationError(
            f"No cloud credentials for Claude: {type(err).__name__}: {err}. For Bedrock set "
            "AWS credentials (or AWS_BEARER_TOKEN_BEDROCK); for Vertex, Google application "
            "default credentials and ANTHROPIC_VERTEX_PROJECT_ID.",
            type=AUTH_ERROR,
            non_retryable=True,
        )
    if isinstance(err, anthropic.APIResponseValidationError):
        return ApplicationError(
            f"The Anthropic API answered in an unexpected shape: {err}. "
            "Check that the anthropic package is up to date.",
            type="AnthropicResponseError",
            non_retryable=True,
        )
    return ApplicationError(
        f"Anthropic API call failed: {type(err).__name__}: {err}",
        type="AnthropicClientError",
    )


def _is_cloud_credentials_error(err: Exception) -> bool:
    """The Bedrock or Vertex client found no credentials or project.

    Checked by name, so the cloud SDKs need not be installed to recognise their errors.
    """
    if type(err).__name__ in _CLOUD_CREDENTIAL_ERRORS:
        return True
    return isinstance(err, RuntimeError) and _CLOUD_SETUP.search(str(err)) is not None


def client_setup_error(err: Exception) -> ApplicationError:
    """The client could not be built (no region, no project): retrying will not help."""
    return ApplicationError(
        f"Cannot set up the Claude client: {err}",
        type=AUTH_ERROR,
        non_retryable=True,
    )


def is_context_overflow(err: anthropic.APIStatusError) -> bool:
    """True for a 400 that says the prompt does not fit the model's context window."""
    status = err.status_code if err.status_code >= 400 else _status_of(err)
    text = f"{err.api_message or ''} {err.message}"
    return status == 400 and _CONTEXT_OVERFLOW.search(text) is not None


def _status_of(err: anthropic.APIStatusError) -> int:
    return _STATUS_OF_ERROR_TYPE.get(err.type or "", 500)


def _status_error(err: anthropic.APIStatusError, model: str | None) -> ApplicationError:
    status = err.status_code
    if status < 400:  # an error event inside a successful stream
        status = _status_of(err)
    request_id = f" [request-id {err.request_id}]" if err.request_id else ""
    detail = f"{err.api_message or err.message}{request_id}"
    if is_context_overflow(err):
        return ApplicationError(
            f"The transcript no longer fits the model's context window: {detail}. "
            "Compact the transcript or shorten the tool results.",
            type=CONTEXT_WINDOW_EXCEEDED,
            non_retryable=True,
        )
    retryable = status in _RETRYABLE_STATUS or status >= 500
    delay = _retry_after(err) if retryable else None
    fallback = "Temporal retries the call." if retryable else "Retrying will not help."
    hint = _HINTS.get(status, fallback)
    if status == 404 and model:
        hint = f"Check the model id {model!r} and ANTHROPIC_BASE_URL."
    if delay is not None:
        hint += f" The API asked to wait {delay.total_seconds():g}s."
    return ApplicationError(
        f"Anthropic API error {status} ({err.type or 'unknown'}): {detail}. {hint}",
        type=INVALID_REQUEST if status in _INVALID_STATUS else API_ERROR,
        non_retryable=not retryable,
        next_retry_delay=delay,
    )


def _retry_after(err: anthropic.APIStatusError) -> timedelta | None:
    """The delay the API asked for, from `retry-after-ms` or `retry-after` (seconds)."""
    headers = err.response.headers
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            seconds = float(value) * scale
        except ValueError:
            continue  # an HTTP date: Anthropic sends seconds, so leave it to the retry policy
        if seconds > 0:
            return timedelta(seconds=seconds)
    return None
