"""The HTTP side: routes, JSON answers and server-sent events."""

from __future__ import annotations

import json
import re
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING, Any

from tests.fake_messages_api import render
from tests.fake_messages_api.prompt import PromptError, parts_of, prompt_tokens
from tests.fake_messages_api.script import MESSAGES, RecordedRequest, ScriptedError, error_body

if TYPE_CHECKING:
    from tests.fake_messages_api.server import FakeMessagesAPI


VERTEX_PATH = re.compile(
    r"^/projects/[^/]+/locations/[^/]+/publishers/anthropic/models/(?P<model>[^/:]+)"
    r":(?:streamRawPredict|rawPredict)$"
)
"""Vertex AI's messages route; the SDK's Vertex client moves the model from the body here."""


def handler_for(api: FakeMessagesAPI) -> type[BaseHTTPRequestHandler]:
    class Handler(_Handler):
        fake = api

    return Handler


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    fake: FakeMessagesAPI

    def log_message(self, format: str, *args: Any) -> None:
        pass  # keep test output clean

    def do_GET(self) -> None:
        headers = {k.lower(): v for k, v in self.headers.items()}
        self.fake.record(RecordedRequest("GET", self.path, headers, None))
        path = self.path.split("?")[0]
        if path.startswith("/v1/models/"):
            model = path.removeprefix("/v1/models/")
            error = self.fake.take_error()
            if error is not None:
                self._send_json(error.status, error.body, error.headers)
            elif self.fake.known_model(model):
                self._send_json(200, _model_info(model), {})
            else:
                self._send_json(404, error_body("not_found_error", f"model: {model}"), {})
        elif path == "/v1/models":
            data = [_model_info(m) for m in sorted(self.fake.models or ())]
            page = {"data": data, "has_more": False, "first_id": None, "last_id": None}
            self._send_json(200, page, {})
        else:
            self._send_json(404, error_body("not_found_error", f"no route {path}"), {})

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("content-length", 0)))
        body = json.loads(raw) if raw else None
        headers = {k.lower(): v for k, v in self.headers.items()}
        self.fake.record(RecordedRequest("POST", self.path, headers, body))
        path = self.path.split("?")[0]
        if path == f"{MESSAGES}/count_tokens" and isinstance(body, dict):
            self._count_tokens(body)
            return
        vertex = VERTEX_PATH.match(path)
        if path != MESSAGES and vertex is None:
            self._send_json(404, error_body("not_found_error", f"no route {path}"), {})
            return
        if vertex is not None and isinstance(body, dict):
            model = urllib.parse.unquote(vertex["model"])
            body = {**body, "model": model}  # checked and answered as if it were in the body
        entry = self.fake.answer(body, vertex=vertex is not None)
        stream = isinstance(body, dict) and bool(body.get("stream"))
        model = body.get("model", "") if isinstance(body, dict) else ""
        try:
            if isinstance(entry, ScriptedError) and not entry.mid_stream:
                self._send_json(entry.status, entry.body, entry.headers)
            elif isinstance(entry, ScriptedError):
                start = render.message_start(model, {"input_tokens": 1, "output_tokens": 0})
                self._send_events([start, ("error", entry.body)], 0.0)
            else:
                answer = render.Answer(
                    entry.content,
                    entry.stop_reason,
                    entry.usage or {},
                    entry.model or model,
                    entry.stop_details,
                    entry.stop_sequence,
                    entry.container,
                )
                if stream:
                    events = render.message_events(answer)[: entry.cut_after]
                    self._send_events(events, entry.event_delay)
                else:
                    self._send_json(200, render.message_json(answer), {})
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (a timeout test); nothing to answer

    def _count_tokens(self, body: dict[str, Any]) -> None:
        try:
            tokens = prompt_tokens(parts_of(body))
        except PromptError as err:
            self._send_json(400, error_body("invalid_request_error", str(err)), {})
            return
        self._send_json(200, {"input_tokens": tokens}, {})

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

    def _send_events(self, events: list[render.Event], delay: float) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("request-id", f"req_fake{next(render.ids)}")
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


def _model_info(model: str) -> dict[str, Any]:
    return {
        "type": "model",
        "id": model,
        "display_name": model,
        "created_at": "2025-01-01T00:00:00Z",
    }
