"""`FakeMessagesAPI`: the server, its script, and what it remembers between requests."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections import deque
from collections.abc import Callable, Collection
from http.server import ThreadingHTTPServer
from typing import Any

from tests.fake_messages_api import render, rules
from tests.fake_messages_api.handler import handler_for
from tests.fake_messages_api.prompt import (
    PromptCache,
    PromptError,
    estimate_tokens,
    parts_of,
    prompt_tokens,
)
from tests.fake_messages_api.script import (
    ERROR_TYPES,
    MESSAGES,
    AutoAnswer,
    RecordedRequest,
    ScriptedError,
    ScriptedMessage,
    error_body,
    reply,
    stop_reason_for,
)


class FakeMessagesAPI:
    """`POST /v1/messages` and `GET /v1/models/{id}` on 127.0.0.1 and a free port.

    Vertex AI's route answers messages too (`handler.VERTEX_PATH`), its model named in the path.

    Args:
        count_tokens: Report usage counted from the request (the prompt cache included) instead
            of the scripted default of 10 input and 5 output tokens. Auto answers always do.
        clock: Seconds, for cache TTLs; hand in your own to expire entries without sleeping.
        context_window: Tokens a prompt may have; a longer one gets "prompt is too long".
        min_cacheable_tokens: The shortest prefix a cache marker caches.
        models: Model ids that exist; None: every `claude-*` id.
        auto_answer: Answers requests when the script is empty.
    """

    def __init__(
        self,
        *,
        count_tokens: bool = False,
        clock: Callable[[], float] = time.monotonic,
        context_window: int = 200_000,
        min_cacheable_tokens: int = 1024,
        models: Collection[str] | None = None,
        auto_answer: AutoAnswer | None = None,
    ) -> None:
        self.requests: list[RecordedRequest] = []
        self.usages: list[dict[str, Any]] = []
        """The usage of every successful answer, in order."""
        self.count_tokens = count_tokens
        self.context_window = context_window
        self.models = None if models is None else set(models)
        self.auto_answer = auto_answer
        self.cache = PromptCache(clock, min_cacheable_tokens)
        self.signer = rules.Signer()
        self._script: deque[ScriptedMessage | ScriptedError] = deque()
        self._lookup_errors: deque[ScriptedError] = deque()
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler_for(self))
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @property
    def base_url(self) -> str:
        """The URL to hand to `AsyncAnthropic(base_url=...)`."""
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def message_requests(self) -> list[RecordedRequest]:
        """The `POST /v1/messages` requests only (no model look-ups or token counts)."""
        return [r for r in self.requests if r.path.split("?")[0] == MESSAGES]

    def __enter__(self) -> FakeMessagesAPI:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()  # joins the request threads
        self._thread.join()

    # --- Script ---------------------------------------------------------------------------

    def enqueue_message(
        self,
        *content: dict[str, Any],
        stop_reason: str | None = None,
        usage: dict[str, Any] | None = None,
        model: str | None = None,
        event_delay: float = 0.0,
        cut_after: int | None = None,
        stop_details: dict[str, Any] | None = None,
        stop_sequence: str | None = None,
        container: dict[str, Any] | None = None,
    ) -> None:
        """Script a successful answer.

        `stop_reason` defaults to max_tokens (a cut-off tool call), stop_sequence (when
        `stop_sequence` names the one it stopped on), tool_use or end_turn.
        With `count_tokens`, `usage` replaces just the counted fields it names.
        """
        entry = ScriptedMessage(
            list(content),
            stop_reason_for(content, stop_reason, stop_sequence),
            model=model,
            event_delay=event_delay,
            cut_after=cut_after,
            stop_details=stop_details,
            stop_sequence=stop_sequence,
            container=container,
        )
        if self.count_tokens:
            entry.usage_overrides = dict(usage or {})
        else:
            entry.usage = {"input_tokens": 10, "output_tokens": 5, **(usage or {})}
        self._push(entry)

    def enqueue_refusal(
        self,
        *content: dict[str, Any],
        category: str | None = "cyber",
        explanation: str | None = "The request could enable cyber harm.",
    ) -> None:
        """Script a `refusal` with its stop details, after any partial `content`."""
        details = {"type": "refusal", "category": category, "explanation": explanation}
        self.enqueue_message(*content, stop_reason="refusal", stop_details=details)

    def enqueue_error(
        self,
        status: int,
        *,
        retry_after: float | None = None,
        retry_after_ms: int | None = None,
        error_type: str | None = None,
        message: str | None = None,
        mid_stream: bool = False,
        lookup: bool = False,
    ) -> None:
        """Script an error in Anthropic's format, optionally with retry-after headers.

        `lookup=True` scripts it for the next `GET /v1/models/{id}` instead of the next
        message call, so a run's model check at start never eats a message call's error.
        """
        error_type = error_type or ERROR_TYPES.get(status, "api_error")
        body = error_body(error_type, message or f"fake {error_type}")
        headers = {"request-id": body["request_id"]}
        if retry_after is not None:
            headers["retry-after"] = f"{retry_after:g}"
        if retry_after_ms is not None:
            headers["retry-after-ms"] = str(retry_after_ms)
        error = ScriptedError(status, body, headers, mid_stream)
        if lookup:
            with self._lock:
                self._lookup_errors.append(error)
        else:
            self._push(error)

    def sign(self, thinking: str) -> str:
        """The signature this server issues for a thinking block with this text."""
        return self.signer.sign(thinking)

    def _push(self, entry: ScriptedMessage | ScriptedError) -> None:
        with self._lock:
            self._script.append(entry)

    # --- Answers --------------------------------------------------------------------------

    def record(self, request: RecordedRequest) -> None:
        """Keep a request for the test to read back."""
        with self._lock:
            self.requests.append(request)

    def known_model(self, model: Any) -> bool:
        """Whether the model id exists here."""
        if not isinstance(model, str):
            return False
        return model.startswith("claude-") if self.models is None else model in self.models

    def answer(self, body: Any, *, vertex: bool = False) -> ScriptedMessage | ScriptedError:
        """Check the request as the API would, then take the next scripted or auto answer.

        A request the API would reject takes nothing from the script: no answer was generated.
        `vertex`: it came by Vertex AI's route, whose body must also name `anthropic_version`.
        """
        if isinstance(body, dict):
            rejected = self._reject(body, vertex)
            if rejected is not None:
                return rejected
        with self._lock:
            if self._script:
                entry = self._script.popleft()
            elif self.auto_answer is not None and isinstance(body, dict):
                made = self.auto_answer(body)
                entry = made if isinstance(made, ScriptedMessage) else reply(*made)
            else:
                return ScriptedError(500, error_body("api_error", "script exhausted"))
            if isinstance(entry, ScriptedMessage) and isinstance(body, dict):
                entry = self._with_usage(entry, body)
        return entry

    def take_error(self) -> ScriptedError | None:
        """The next error scripted for a model look-up (`enqueue_error(..., lookup=True)`)."""
        with self._lock:
            return self._lookup_errors.popleft() if self._lookup_errors else None

    def _reject(self, body: dict[str, Any], vertex: bool) -> ScriptedError | None:
        if "model" in body and not self.known_model(body["model"]):
            return ScriptedError(404, error_body("not_found_error", f"model: {body['model']}"))
        try:
            if vertex:
                rules.check_vertex(body)
            rules.check(body, self.signer)
            tokens = prompt_tokens(parts_of(body))
            if tokens > self.context_window:
                raise PromptError(
                    f"prompt is too long: {tokens} tokens > {self.context_window} maximum"
                )
        except PromptError as err:
            return ScriptedError(400, error_body("invalid_request_error", str(err)))
        return None

    def _with_usage(self, entry: ScriptedMessage, body: dict[str, Any]) -> ScriptedMessage:
        """Sign the answer's thinking, count its usage, and log the usage (lock held)."""
        content = [self._signed(block) for block in entry.content]
        usage = entry.usage
        if usage is None:
            output = sum(estimate_tokens(render.public_block(b)) for b in content)
            usage = {
                **self.cache.account(parts_of(body)),
                "output_tokens": max(1, output),
                **entry.usage_overrides,
            }
        self.usages.append(usage)
        return dataclasses.replace(entry, content=content, usage=usage)

    def _signed(self, block: dict[str, Any]) -> dict[str, Any]:
        if block["type"] == "thinking" and block.get("signature") is None:
            return {**block, "signature": self.signer.sign(block["thinking"])}
        if block["type"] == "redacted_thinking" and block.get("data") is None:
            return {**block, "data": self.signer.redacted()}
        return block
