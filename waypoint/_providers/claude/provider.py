"""Claude as a model provider: one streamed Messages API call per activity attempt.

A reply comes back whatever its stop reason (`max_tokens`, `refusal`, `pause_turn`,
`model_context_window_exceeded`, ...): deciding what each means is the workflow's job.
Only a failed call raises, mapped by `waypoint._providers.claude.errors`.
"""

from __future__ import annotations

import anthropic
from anthropic.types import Message as APIMessage
from temporalio import activity

from waypoint._providers import live, spend
from waypoint._providers.claude.backends import DEFAULT_TIMEOUT, require_backend
from waypoint._providers.claude.client import AnthropicClient, build_client
from waypoint._providers.claude.convert import (
    container_of,
    reply_blocks,
    server_call_shown,
    stop_details_of,
    usage_of,
)
from waypoint._providers.claude.errors import client_setup_error, to_application_error
from waypoint._providers.claude.request import stream_params
from waypoint._providers.pricing import cost_usd
from waypoint.protocol import ModelRequest, ModelResponse


class AnthropicModel:
    """Answers model steps with Claude, streaming so a long answer keeps heartbeating.

    Args:
        client: The client to call the API with; its retries are turned off, as Temporal owns
            them. If omitted, one is built on first use for `backend` from the worker's
            environment (see `waypoint._providers.claude.client`), never from a payload.
        backend: `anthropic`, `bedrock` or `vertex`, when no client is given.
        timeout: Seconds the built client waits on a connection or between streamed chunks.

    Raises:
        ModelNotConfiguredError: The backend is unknown or its package extra is missing, so a
            misconfigured worker stops at start instead of failing every run.
    """

    def __init__(
        self,
        client: AnthropicClient | None = None,
        *,
        backend: str = "anthropic",
        timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        if client is None:
            require_backend(backend)
        self._client = client.with_options(max_retries=0) if client is not None else None
        self._owns_client = client is None
        self._backend = backend
        self._timeout = timeout

    @property
    def client(self) -> AnthropicClient:
        """The API client, built on first use so a worker without credentials still starts."""
        if self._client is None:
            try:
                self._client = build_client(self._backend, self._timeout)
            except ValueError as err:  # the SDK found no region or project
                raise client_setup_error(err) from err
        return self._client

    async def close(self) -> None:
        """Close the client this model built; a client handed in is its owner's to close."""
        if self._owns_client and self._client is not None:
            await self._client.close()
            self._client = None

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Make one streamed Messages API call and convert its final message.

        Raises:
            ApplicationError: The call failed; `non_retryable` and `next_retry_delay` say
                whether and when Temporal should try again (see `_providers.claude.errors`).
        """
        try:
            message = await self._stream(request)
            stop_reason = message.stop_reason
            if stop_reason is None:
                raise _IncompleteStreamError("the stream ended before the message was complete")
        except Exception as err:
            raise to_application_error(err, request.model) from err
        usage = usage_of(message)
        model = message.model or request.model
        return ModelResponse(
            content=reply_blocks(message),
            stop_reason=stop_reason,
            stop_sequence=message.stop_sequence,
            stop_details=stop_details_of(message),
            usage=usage,
            cost_usd=cost_usd(model, usage),
            model=model,
            container=container_of(message),
        )

    async def check_model(self, model: str) -> str | None:
        """Say why `model` cannot be used, or None when it exists or nobody can tell.

        Only Anthropic's own API lists models; on Bedrock or Vertex, without credentials, or
        on any error but the API's own "not found", the run is not blocked.
        """
        try:
            client = self.client
            if not isinstance(client, anthropic.AsyncAnthropic):
                return None
            await client.models.retrieve(model)
        except anthropic.NotFoundError as err:
            if err.type != "not_found_error":
                return None  # a gateway without a models endpoint, not an unknown model
            return (
                f"unknown model id {model!r}: the Anthropic API has no such model "
                f"({err.api_message or err.message}). Check the agent's model."
            )
        except Exception:
            return None
        return None

    async def _stream(self, request: ModelRequest) -> APIMessage:
        heartbeat = activity.in_activity()
        said = False  # a later text block starts on a line of its own, as the output joins them
        async with self.client.messages.stream(**stream_params(request)) as stream:
            async for event in stream:
                if event.type == "content_block_start" and event.content_block.type == "text":
                    if said:
                        live.emit("text", "\n")
                    said = True
                elif event.type in ("message_start", "message_delta"):
                    # What a cancelled call spent: the input at the start, all of it once
                    # the final usage (a cumulative `message_delta`) has arrived.
                    snapshot = stream.current_message_snapshot
                    usage = usage_of(snapshot)
                    ended = event.type == "message_delta"
                    price = cost_usd(snapshot.model or request.model, usage) if ended else None
                    spend.report(usage, known=ended, cost_usd=price)
                elif event.type == "content_block_delta":
                    delta = event.delta
                    if delta.type == "text_delta":
                        live.emit("text", delta.text)
                    elif delta.type == "thinking_delta":
                        live.emit("thinking", delta.thinking)
                elif event.type == "content_block_stop":
                    block = stream.current_message_snapshot.content[event.index]
                    if block.type == "server_tool_use":  # "web_search: ..." while Claude works
                        live.emit("text", f"\n[{block.name}: {server_call_shown(block.input)}]\n")
                if heartbeat:
                    activity.heartbeat()
            return await stream.get_final_message()


class _IncompleteStreamError(Exception):
    """The connection closed mid-answer; the call is worth retrying."""
