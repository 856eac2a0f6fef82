"""Claude through the Messages API: one streamed call per attempt, errors mapped for Temporal.

Anthropic's SDK types never leave this module: requests are built from Waypoint's message
models and answers converted back to them, so workflow history does not depend on the SDK.
The SDK never retries (`max_retries=0`); a failed call becomes an `ApplicationError` that tells
Temporal whether to retry it and when.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import anthropic
import httpx2
from anthropic.types import (
    ContentBlockParam,
    MessageParam,
    ToolParam,
)
from anthropic.types import (
    Message as APIMessage,
)
from temporalio import activity
from temporalio.exceptions import ApplicationError

from waypoint.models import (
    ContentBlock,
    Message,
    ModelRequest,
    ModelResponse,
    TextBlock,
    ToolResultBlock,
    ToolSpec,
    ToolUseBlock,
    Usage,
)
from waypoint.pricing import cost_usd

_HINTS: dict[int, str] = {
    400: "The request is invalid: check the model id, max_tokens and the transcript.",
    401: "Check ANTHROPIC_API_KEY in the worker's environment.",
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


class AnthropicModel:
    """Answers model steps with Claude, streaming so a long answer keeps heartbeating.

    Args:
        client: The client to call the API with; its retries are turned off, as Temporal owns
            them. If omitted, one is created on first use from the worker's environment
            (`ANTHROPIC_API_KEY`, `ANTHROPIC_BASE_URL`), never from a payload.
    """

    def __init__(self, client: anthropic.AsyncAnthropic | None = None) -> None:
        self._client = client.with_options(max_retries=0) if client is not None else None
        self._owns_client = client is None

    @property
    def client(self) -> anthropic.AsyncAnthropic:
        """The API client, created on first use so a worker without a key can still start."""
        if self._client is None:
            self._client = anthropic.AsyncAnthropic(max_retries=0)
        return self._client

    async def close(self) -> None:
        """Close the client this model created; a client handed in is its owner's to close."""
        if self._owns_client and self._client is not None:
            await self._client.close()
            self._client = None

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Make one streamed Messages API call and convert its final message.

        Raises:
            ApplicationError: The call failed; `non_retryable` and `next_retry_delay` say
                whether and when Temporal should try again.
        """
        try:
            message = await self._stream(request)
            stop_reason = message.stop_reason
            if stop_reason is None:
                raise _IncompleteStreamError("the stream ended before the message was complete")
        except Exception as err:
            raise to_application_error(err) from err
        usage = _usage(message)
        model = message.model or request.model
        return ModelResponse(
            content=_blocks(message),
            stop_reason=stop_reason,
            usage=usage,
            cost_usd=cost_usd(model, usage),
            model=model,
        )

    async def _stream(self, request: ModelRequest) -> APIMessage:
        heartbeat = activity.in_activity()
        async with self.client.messages.stream(
            model=request.model,
            max_tokens=request.max_tokens,
            system=request.system or anthropic.omit,
            tools=[_tool_param(t) for t in request.tools] or anthropic.omit,
            messages=[_message_param(m) for m in request.messages],
        ) as stream:
            async for _event in stream:
                if heartbeat:
                    activity.heartbeat()
            return await stream.get_final_message()


class _IncompleteStreamError(Exception):
    """The connection closed mid-answer; the call is worth retrying."""


def to_application_error(err: Exception) -> ApplicationError:
    """Map a failed Messages API call to an error that tells Temporal whether to retry."""
    if isinstance(err, anthropic.APIStatusError):
        return _status_error(err)
    # A stream that stalls or drops mid-answer raises the transport's own errors, not the SDK's.
    if isinstance(err, anthropic.APITimeoutError | httpx2.TimeoutException):
        return ApplicationError(
            f"Anthropic API call timed out: {err}. Temporal retries the call.",
            type="AnthropicTimeoutError",
        )
    if isinstance(err, anthropic.APIConnectionError | httpx2.TransportError):
        return ApplicationError(
            f"Could not reach the Anthropic API: {err} (cause: {err.__cause__!r}). "
            "Check the network and ANTHROPIC_BASE_URL; Temporal retries the call.",
            type="AnthropicConnectionError",
        )
    if isinstance(err, anthropic.CredentialsError) or (
        isinstance(err, TypeError) and "authentication method" in str(err)
    ):
        return ApplicationError(
            f"No Anthropic credentials: {err}. Set ANTHROPIC_API_KEY in the worker's environment.",
            type="AnthropicAuthError",
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


def _status_error(err: anthropic.APIStatusError) -> ApplicationError:
    status = err.status_code
    if status < 400:  # an error event inside a successful stream
        status = _STATUS_OF_ERROR_TYPE.get(err.type or "", 500)
    retryable = status in _RETRYABLE_STATUS or status >= 500
    delay = _retry_after(err) if retryable else None
    fallback = "Temporal retries the call." if retryable else "Retrying will not help."
    hint = _HINTS.get(status, fallback)
    if delay is not None:
        hint += f" The API asked to wait {delay.total_seconds():g}s."
    request_id = f" [request-id {err.request_id}]" if err.request_id else ""
    return ApplicationError(
        f"Anthropic API error {status} ({err.type or 'unknown'}): "
        f"{err.api_message or err.message}{request_id}. {hint}",
        type="AnthropicAPIError",
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


# --- Conversion -----------------------------------------------------------------------------


def _tool_param(tool: ToolSpec) -> ToolParam:
    return {
        "name": tool.name,
        "description": tool.description,
        "input_schema": tool.input_schema,
    }


def _message_param(message: Message) -> MessageParam:
    content = [_block_param(b) for b in message.content]
    if message.role == "assistant":
        return {"role": "assistant", "content": content}
    return {"role": "user", "content": content}


def _block_param(block: ContentBlock) -> ContentBlockParam:
    if isinstance(block, TextBlock):
        return {"type": "text", "text": block.text}
    if isinstance(block, ToolUseBlock):
        return {"type": "tool_use", "id": block.id, "name": block.name, "input": block.input}
    assert isinstance(block, ToolResultBlock)
    return {
        "type": "tool_result",
        "tool_use_id": block.tool_use_id,
        "content": block.content,
        "is_error": block.is_error,
    }


def _blocks(message: APIMessage) -> list[ContentBlock]:
    """Text and tool calls; thinking and server-side blocks are not part of our transcript."""
    blocks: list[ContentBlock] = []
    for block in message.content:
        if block.type == "text":
            blocks.append(TextBlock(text=block.text))
        elif block.type == "tool_use":
            arguments: Any = block.input
            blocks.append(
                ToolUseBlock(
                    id=block.id,
                    name=block.name,
                    input=dict(arguments) if isinstance(arguments, dict) else {},
                )
            )
    return blocks


def _usage(message: APIMessage) -> Usage:
    usage = message.usage
    return Usage(
        input_tokens=usage.input_tokens or 0,
        output_tokens=usage.output_tokens or 0,
        cache_creation_input_tokens=usage.cache_creation_input_tokens or 0,
        cache_read_input_tokens=usage.cache_read_input_tokens or 0,
    )
