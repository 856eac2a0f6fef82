"""The codec server: lets the Web UI and the `temporal` CLI decrypt payloads for display.

It follows the codec server protocol: Payloads as proto3 JSON in and out; the final path
segment picks ``encode`` or ``decode``, so ``/{namespace}/decode`` works too; query strings
are ignored. External-storage references pass through ``/decode`` unchanged, which is what the
UI asks for with ``?preserveStorageRefs=true``; ``/download`` (the UI's "show the stored
payload") is not served.
Run it with::

    server = serve_codec(codec, token, "127.0.0.1", 8081)
    server.serve_forever()  # from another thread: server.shutdown(); then server.server_close()

Every POST needs the token (make one with ``secrets.token_urlsafe()``), either as
``Authorization: Bearer <token>`` or as a path segment before the endpoint. The CLI sends the
header: ``temporal workflow show -w RUN --codec-endpoint http://127.0.0.1:8081/{namespace}
--codec-auth "Bearer TOKEN"`` (or ``TEMPORAL_CODEC_AUTH`` in its environment, which keeps the
token out of ``ps``). The Web UI cannot: it sends ``Authorization`` only when its "pass access
token" setting is on and the endpoint is HTTPS, and then it carries the UI login's own OIDC
access token. So the UI needs the token in the endpoint's path, ``http://127.0.0.1:8081/TOKEN``.
Set that in the UI's own codec server settings, which the browser keeps in its local storage:
``temporal server start-dev --ui-codec-endpoint`` would put the token in the dev server's
process arguments and serve it to anyone at ``/api/v1/settings``. The UI then sends a CORS
preflight and ``POST <endpoint>/decode`` with ``X-Namespace``. Anyone who can open that UI can
decrypt through it, which is what the UI is for: keep both on loopback or behind your own
authentication. The UI's origin must be in ``allowed_origins`` (the default allows the dev
server's UI on port 8233; `waypoint codec-server` adds Temporal Cloud's UI when its connection
profile points at Cloud, and serves only that profile's namespace).

Refusals cost nothing: the origin, the path, the token and the declared length are all checked
before a byte of the body is read, and at most ``max_in_flight`` connections are served at once
(the rest get 503 at once), so memory stays bounded whatever unauthenticated clients send.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import logging
import socket
import stat
import threading
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from google.protobuf import json_format
from temporalio.api.common.v1 import Payloads

from waypoint.codec import EncryptionCodec, EncryptionKeyError, PayloadDecryptionError
from waypoint.errors import WaypointError

logger = logging.getLogger(__name__)
DEV_UI_ORIGINS = ("http://localhost:8233", "http://127.0.0.1:8233")
MAX_BODY_BYTES = 64 * 1024 * 1024
MAX_IN_FLIGHT = 4
# After a refusal, up to this much of an unread body is discarded (never kept) before closing, so
# the client reads the refusal instead of a connection reset: Apache's "lingering close".
LINGER_BYTES = 256 * 1024
LINGER_SECONDS = 1.0
BUSY_RESPONSE = (
    b"HTTP/1.0 503 Service Unavailable\r\nContent-Type: application/json\r\n"
    b"Retry-After: 1\r\nConnection: close\r\nContent-Length: 52\r\n\r\n"
    b'{"message": "codec server busy; retry in a moment"}\n'
)


class CodecTokenError(WaypointError):
    """The codec server's token is missing, or its file is unreadable or readable by others."""


def read_token_file(path: Path) -> str:
    """The token in `path`, refused unless only its owner may read it (mode 0600 or 0400)."""
    try:
        mode = path.stat().st_mode
        token = path.read_text().strip()
    except OSError as err:
        raise CodecTokenError(f"cannot read the codec token file {path}: {err.strerror}") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise CodecTokenError(
            f"the codec token file {path} is open to other users (mode {stat.filemode(mode)}): "
            f"run `chmod 600 {path}`"
        )
    if not token:
        raise CodecTokenError(f"the codec token file {path} is empty")
    return token


def codec_app(
    codec: EncryptionCodec,
    token: str,
    allowed_origins: Sequence[str] = DEV_UI_ORIGINS,
    namespace: str | None = None,
) -> type[BaseHTTPRequestHandler]:
    """A request handler class serving the codec server protocol for `codec`, behind `token`.

    With `namespace`, a request whose `X-Namespace` names another namespace is refused, and one
    naming none (neither the header nor a `/{namespace}/` path segment) too: the keys belong to
    the namespace of the connection profile the server was started with.
    """
    if not token:
        raise ValueError("the codec server needs a non-empty token")
    secret = token.encode()
    origins = frozenset(origin.rstrip("/") for origin in allowed_origins)

    class CodecHandler(BaseHTTPRequestHandler):
        """Answers POST .../encode and .../decode, and the browser's CORS preflight."""

        server_version = "waypoint-codec"
        sys_version = ""
        timeout = 30

        def do_OPTIONS(self) -> None:
            """Answer the CORS preflight the UI sends before each POST."""
            if self._refused_origin() or self._route() is None:
                return
            self.send_response(204)
            self._cors_headers(preflight=True)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_POST(self) -> None:
            """Decrypt or encrypt the posted payloads, once the token and the length check out."""
            # Every refusal comes before the body is read: an unauthenticated client costs nothing.
            if self._refused_origin():
                return self._linger()
            segments = self._route()
            if segments is None:
                return self._linger()
            if not self._authorized(segments[:-1]):
                self._reply(401, {"message": "missing or wrong codec server token"})
                return self._linger()
            asked = self.headers.get("X-Namespace") or None
            if namespace is not None and asked is not None and asked != namespace:
                self._reply(403, {"message": f"this codec server serves namespace {namespace}"})
                return self._linger()
            declared = self.headers.get("Content-Length")
            if declared is None or not declared.strip().isdigit():
                self._reply(411, {"message": "a numeric Content-Length is required"})
                return self._linger()
            length = int(declared)
            if length > MAX_BODY_BYTES:
                self._reply(413, {"message": f"body over {MAX_BODY_BYTES} bytes"})
                return self._linger()
            if namespace is not None and asked is None and namespace not in segments[:-1]:
                # Keys belong to one namespace: a request must say which one it decodes for.
                self._reply(400, {"message": f"name the namespace: X-Namespace: {namespace}"})
                return self._linger()
            body = self.rfile.read(length)
            try:
                request = json_format.Parse(body, Payloads(), ignore_unknown_fields=True)
            except (json_format.ParseError, UnicodeDecodeError) as err:
                return self._reply(400, {"message": f"body is not Payloads JSON: {err}"})
            convert = codec.encrypt if segments[-1] == "encode" else codec.decrypt
            try:
                result = Payloads(payloads=[convert(p) for p in request.payloads])
            except (EncryptionKeyError, PayloadDecryptionError) as err:
                return self._reply(400, {"message": str(err)})
            self._reply(200, json_format.MessageToDict(result))

        def _linger(self) -> None:
            """Close after a refusal; discard a little unread body so the client sees the answer."""
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.wfile.flush()
                self.connection.shutdown(socket.SHUT_WR)
                self.connection.settimeout(LINGER_SECONDS)
                left = LINGER_BYTES
                while left > 0:
                    chunk = self.connection.recv(min(65536, left))
                    if not chunk:
                        break
                    left -= len(chunk)

        def _route(self) -> list[str] | None:
            """The path's segments if it ends in encode or decode; otherwise answer 404."""
            path = urlsplit(self.path).path
            segments = [unquote(s) for s in path.split("/") if s]
            if segments and segments[-1] in ("encode", "decode"):
                return segments
            self._reply(404, {"message": "not found; POST to .../encode or .../decode"})
            return None

        def _authorized(self, prefix: Sequence[str]) -> bool:
            scheme, _, credential = self.headers.get("Authorization", "").strip().partition(" ")
            if scheme.lower() == "bearer" and hmac.compare_digest(
                credential.strip().encode(), secret
            ):
                return True
            return any(hmac.compare_digest(s.encode(), secret) for s in prefix)

        def _refused_origin(self) -> bool:
            """Answer 403 to a browser on an origin that is not allowed."""
            origin = self.headers.get("Origin")
            if origin is None or origin in origins:
                return False
            self._reply(403, {"message": f"origin {origin} is not allowed"})
            return True

        def _cors_headers(self, preflight: bool = False) -> None:
            origin = self.headers.get("Origin")
            if origin is None or origin not in origins:
                return
            self.send_header("Access-Control-Allow-Origin", origin)
            self.send_header("Access-Control-Allow-Credentials", "true")
            self.send_header("Vary", "Origin")
            if preflight:
                self.send_header("Access-Control-Allow-Methods", "POST, OPTIONS")
                self.send_header(
                    "Access-Control-Allow-Headers",
                    "Authorization, Authorization-Extras, Content-Type, X-Namespace",
                )
                self.send_header("Access-Control-Max-Age", "600")
                # Chrome asks this when a public page (e.g. Temporal Cloud's UI) calls loopback.
                if self.headers.get("Access-Control-Request-Private-Network") == "true":
                    self.send_header("Access-Control-Allow-Private-Network", "true")

        def _reply(self, status: int, body: dict[str, object]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self._cors_headers()
            if status == 401:
                self.send_header("WWW-Authenticate", 'Bearer realm="waypoint-codec"')
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
            """Log without the path, which may hold the token."""
            logger.debug("codec server %s %s", self.command, code)

        def log_message(self, format: str, *args: object) -> None:
            """Send http.server's own messages to logging instead of stderr."""
            # A malformed request line is quoted in these, and its path may hold the token.
            logger.warning("codec server: %s", (format % args).replace(token, "<token>"))

    return CodecHandler


class BoundedCodecServer(ThreadingHTTPServer):
    """A threading HTTP server that serves at most `max_in_flight` connections at once."""

    daemon_threads = True
    block_on_close = False
    """Stopping does not wait for requests in flight: a Web UI asks again, and a client that
    holds a connection open must not keep the server from exiting."""

    def __init__(
        self,
        address: tuple[str, int],
        handler: type[BaseHTTPRequestHandler],
        max_in_flight: int = MAX_IN_FLIGHT,
    ) -> None:
        if max_in_flight < 1:
            raise ValueError("max_in_flight must be at least 1")
        self.slots = threading.BoundedSemaphore(max_in_flight)
        super().__init__(address, handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        """Hand the connection to a thread if a slot is free; otherwise answer 503 and close."""
        if not self.slots.acquire(blocking=False):
            # Small enough for the socket's send buffer: writing it never blocks the accept loop.
            with contextlib.suppress(OSError):
                request.sendall(BUSY_RESPONSE)
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        """Serve one connection, then give its slot back."""
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()


def serve_codec(
    codec: EncryptionCodec,
    token: str,
    host: str = "127.0.0.1",
    port: int = 8081,
    allowed_origins: Sequence[str] = DEV_UI_ORIGINS,
    max_in_flight: int = MAX_IN_FLIGHT,
    namespace: str | None = None,
) -> BoundedCodecServer:
    """A bound codec server, not yet serving: call `serve_forever()`; port 0 picks a free one."""
    handler = codec_app(codec, token, allowed_origins, namespace)
    return BoundedCodecServer((host, port), handler, max_in_flight)
