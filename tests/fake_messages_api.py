"""A local HTTP server that speaks enough of the Messages API for the real `anthropic` client.

Tests script its answers in order (a message, or an error) and read back every request it got,
so they can assert on the exact body sent and count HTTP calls. Streaming answers are sent as
server-sent events, one chunk at a time, so the client really streams.

    with FakeMessagesAPI() as api:
        api.enqueue_message(tool_use("lookup", {"q": "x"}), usage={"input_tokens": 10})
        api.enqueue_error(429, retry_after=3)
        client = AsyncAnthropic(base_url=api.base_url, api_key="test", max_retries=0)
        ...
        assert len(api.requests) == 2
"""

from __future__ import annotations

import itertools
import json
import re
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    408: "timeout_error",
    409: "conflict_error",
    413: "request_too_large",
    422: "invalid_request_error",
    429: "rate_limit_error",
    500: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}

_ids = itertools.count(1)

_VERTEX_PATH = re.compile(
    r"^/projects/[^/]+/locations/[^/]+/publishers/anthropic/models/(?P<model>[^/:]+)"
    r":(?:streamRawPredict|rawPredict)$"
)


def text(value: str) -> dict[str, Any]:
    """A text content block for `enqueue_message`."""
    return {"type": "text", "text": value}


def tool_use(name: str, input: dict[str, Any], id: str | None = None) -> dict[str, Any]:
    """A tool_use content block for `enqueue_message`.

    A block may instead carry `partial_json`, streamed as is (a call cut off mid-input).
    """
    return {"type": "tool_use", "id": id or f"toolu_fake{next(_ids)}", "name": name, "input": input}


def thinking(value: str, signature: str) -> dict[str, Any]:
    """A thinking block, streamed as thinking deltas then its signature."""
    return {"type": "thinking", "thinking": value, "signature": signature}


def redacted_thinking(data: str) -> dict[str, Any]:
    """A redacted_thinking block, sent whole in its content_block_start."""
    return {"type": "redacted_thinking", "data": data}


@dataclass
class RecordedRequest:
    """One HTTP request the server received."""

    method: str
    path: str
    headers: dict[str, str]
    """Header names lower-cased."""
    body: Any


@dataclass
class ScriptedMessage:
    """A successful answer."""

    content: list[dict[str, Any]]
    stop_reason: str
    usage: dict[str, int]
    model: str | None = None
    """None: echo the requested model."""
    event_delay: float = 0.0
    """Seconds between streamed events."""
    cut_after: int | None = None
    """End the stream after this many events, as a dropped connection would."""
    stop_sequence: str | None = None
    stop_details: dict[str, Any] | None = None
    """E.g. `{"type": "refusal", "category": "cyber", "explanation": "..."}`."""


@dataclass
class ScriptedError:
    """A failed answer: an HTTP error, or an `error` event inside a 200 stream."""

    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)
    mid_stream: bool = False


class FakeMessagesAPI:
    """`POST /v1/messages` on 127.0.0.1 and a free port, answered from a script."""

    def __init__(self) -> None:
        self.requests: list[RecordedRequest] = []
        self.models: set[str] = set()
        """Model ids `GET /v1/models/{id}` knows; others get a 404."""
        self._script: deque[ScriptedMessage | ScriptedError] = deque()
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @property
    def base_url(self) -> str:
        """The URL to hand to `AsyncAnthropic(base_url=...)`."""
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def __enter__(self) -> FakeMessagesAPI:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()  # joins the request threads
        self._thread.join()

    def enqueue_message(
        self,
        *content: dict[str, Any],
        stop_reason: str | None = None,
        usage: dict[str, int] | None = None,
        model: str | None = None,
        event_delay: float = 0.0,
        cut_after: int | None = None,
        stop_sequence: str | None = None,
        stop_details: dict[str, Any] | None = None,
    ) -> None:
        """Script a successful answer; `stop_reason` defaults to tool_use or end_turn."""
        if stop_reason is None:
            calls = any(block["type"] == "tool_use" for block in content)
            stop_reason = "tool_use" if calls else "end_turn"
        usage = {"input_tokens": 10, "output_tokens": 5, **(usage or {})}
        self._push(
            ScriptedMessage(
                list(content),
                stop_reason,
                usage,
                model,
                event_delay,
                cut_after,
                stop_sequence,
                stop_details,
            )
        )

    def enqueue_error(
        self,
        status: int,
        *,
        retry_after: float | None = None,
        retry_after_ms: int | None = None,
        error_type: str | None = None,
        message: str | None = None,
        mid_stream: bool = False,
    ) -> None:
        """Script an error in Anthropic's format, optionally with retry-after headers."""
        error_type = error_type or ERROR_TYPES.get(status, "api_error")
        body = {
            "type": "error",
            "error": {"type": error_type, "message": message or f"fake {error_type}"},
            "request_id": f"req_fake{next(_ids)}",
        }
        headers = {"request-id": body["request_id"]}
        if retry_after is not None:
            headers["retry-after"] = f"{retry_after:g}"
        if retry_after_ms is not None:
            headers["retry-after-ms"] = str(retry_after_ms)
        self._push(ScriptedError(status, body, headers, mid_stream))

    def _push(self, entry: ScriptedMessage | ScriptedError) -> None:
        with self._lock:
            self._script.append(entry)

    def _next(self, request: RecordedRequest) -> ScriptedMessage | ScriptedError:
        with self._lock:
            self.requests.append(request)
            if self._script:
                return self._script.popleft()
        return ScriptedError(
            500, {"type": "error", "error": {"type": "api_error", "message": "script exhausted"}}
        )


def _handler_for(api: FakeMessagesAPI) -> type[BaseHTTPRequestHandler]:
    class Handler(_Handler):
        fake = api

    return Handler


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    fake: FakeMessagesAPI

    def log_message(self, format: str, *args: Any) -> None:
        pass  # keep test output clean

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("content-length", 0)))
        body = json.loads(raw) if raw else None
        headers = {k.lower(): v for k, v in self.headers.items()}
        entry = self.fake._next(RecordedRequest("POST", self.path, headers, body))
        path = self.path.split("?")[0]
        vertex = _VERTEX_PATH.match(path)
        if path != "/v1/messages" and not vertex:
            entry = ScriptedError(404, {"type": "error", "error": {"type": "not_found_error"}})
        stream = isinstance(body, dict) and bool(body.get("stream"))
        model = body.get("model", "") if isinstance(body, dict) else ""
        if vertex:  # Vertex names the model in the path, not the body
            model = vertex["model"]
        try:
            if isinstance(entry, ScriptedError) and not entry.mid_stream:
                self._send_json(entry.status, entry.body, entry.headers)
            elif isinstance(entry, ScriptedError):
                self._send_events(
                    [_message_start(model, {"input_tokens": 1, "output_tokens": 0})]
                    + [("error", entry.body)],
                    0.0,
                )
            elif stream:
                events = _message_events(entry, model)[: entry.cut_after]
                self._send_events(events, entry.event_delay)
            else:
                self._send_json(200, _message_json(entry, model), {})
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (a timeout test); nothing to answer

    def do_GET(self) -> None:
        """`GET /v1/models/{id}`: a scripted error if one is next, else known or 404."""
        headers = {k.lower(): v for k, v in self.headers.items()}
        path = self.path.split("?")[0]
        with self.fake._lock:
            self.fake.requests.append(RecordedRequest("GET", path, headers, None))
            script = self.fake._script
            error = script.popleft() if script and isinstance(script[0], ScriptedError) else None
        model = path.removeprefix("/v1/models/")
        if isinstance(error, ScriptedError):
            self._send_json(error.status, error.body, error.headers)
        elif path.startswith("/v1/models/") and model in self.fake.models:
            info = {"type": "model", "id": model, "display_name": model}
            self._send_json(200, {**info, "created_at": "2026-01-01T00:00:00Z"}, {})
        else:
            message = f"model: {model}" if path.startswith("/v1/models/") else "not found"
            error_body = {"type": "not_found_error", "message": message}
            self._send_json(404, {"type": "error", "error": error_body}, {})

    def _send_json(self, status: int, payload: Any, headers: dict[str, str]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.send_header("connection", "close")
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _send_events(self, events: list[tuple[str, dict[str, Any]]], delay: float) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("request-id", f"req_fake{next(_ids)}")
        self.send_header("transfer-encoding", "chunked")
        self.send_header("connection", "close")
        self.end_headers()
        for name, data in events:
            chunk = f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            self.wfile.flush()
            if delay:
                time.sleep(delay)
        self.wfile.write(b"0\r\n\r\n")


def _message_json(entry: ScriptedMessage, model: str) -> dict[str, Any]:
    return {
        "id": f"msg_fake{next(_ids)}",
        "type": "message",
        "role": "assistant",
        "model": entry.model or model,
        "content": entry.content,
        "stop_reason": entry.stop_reason,
        "stop_sequence": entry.stop_sequence,
        "stop_details": entry.stop_details,
        "usage": entry.usage,
    }


def _message_start(model: str, usage: dict[str, int]) -> tuple[str, dict[str, Any]]:
    message = {
        "id": f"msg_fake{next(_ids)}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {**usage, "output_tokens": 1},
    }
    return "message_start", {"type": "message_start", "message": message}


def _message_events(entry: ScriptedMessage, model: str) -> list[tuple[str, dict[str, Any]]]:
    """The events the API streams for a message: start, each block in deltas, delta, stop."""
    start_usage = {k: v for k, v in entry.usage.items() if k != "output_tokens"}
    events = [_message_start(entry.model or model, start_usage), ("ping", {"type": "ping"})]
    for index, block in enumerate(entry.content):
        if block["type"] == "text":
            start = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": part} for part in _split(block["text"])]
        elif block["type"] == "tool_use":
            start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            raw = block.get("partial_json", json.dumps(block.get("input")))
            deltas = [{"type": "input_json_delta", "partial_json": part} for part in _split(raw)]
        elif block["type"] == "thinking":
            start = {"type": "thinking", "thinking": "", "signature": ""}
            deltas = [{"type": "thinking_delta", "thinking": p} for p in _split(block["thinking"])]
            deltas.append({"type": "signature_delta", "signature": block["signature"]})
        elif block["type"] == "redacted_thinking":
            start, deltas = dict(block), []
        else:
            raise ValueError(f"fake server cannot stream a {block['type']!r} block")
        events.append(
            (
                "content_block_start",
                {"type": "content_block_start", "index": index, "content_block": start},
            )
        )
        for delta in deltas:
            events.append(
                (
                    "content_block_delta",
                    {"type": "content_block_delta", "index": index, "delta": delta},
                )
            )
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    events.append(
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {
                    "stop_reason": entry.stop_reason,
                    "stop_sequence": entry.stop_sequence,
                    "stop_details": entry.stop_details,
                },
                "usage": {"output_tokens": entry.usage["output_tokens"]},
            },
        )
    )
    events.append(("message_stop", {"type": "message_stop"}))
    return events


def _split(value: str, parts: int = 3) -> list[str]:
    """Cut a string into a few pieces, as the API's deltas do."""
    size = max(1, -(-len(value) // parts))
    return [value[i : i + size] for i in range(0, len(value), size)] or [""]
