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
--codec-auth "Bearer TOKEN"``. The Web UI cannot: it sends ``Authorization`` only when its
"pass access token" setting is on and the endpoint is HTTPS, and then it carries the UI login's
own OIDC access token. So point the UI at an endpoint with the token in its path, e.g.
``temporal server start-dev --ui-codec-endpoint http://127.0.0.1:8081/TOKEN``; the UI then sends
a CORS preflight and ``POST <endpoint>/decode`` with ``X-Namespace``. Anyone who can open that UI
can decrypt through it, which is what the UI is for: keep both on loopback or behind your own
authentication. The UI's origin must be in ``allowed_origins`` (the default allows the dev
server's UI on port 8233).
"""

from __future__ import annotations

import hmac
import json
import logging
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit

from google.protobuf import json_format
from temporalio.api.common.v1 import Payloads

from waypoint.codec import EncryptionCodec, EncryptionKeyError, PayloadDecryptionError

logger = logging.getLogger(__name__)
DEV_UI_ORIGINS = ("http://localhost:8233", "http://127.0.0.1:8233")
MAX_BODY_BYTES = 64 * 1024 * 1024


def codec_app(
    codec: EncryptionCodec, token: str, allowed_origins: Sequence[str] = DEV_UI_ORIGINS
) -> type[BaseHTTPRequestHandler]:
    """A request handler class serving the codec server protocol for `codec`, behind `token`."""
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
            """Decrypt or encrypt the posted payloads, once the token checks out."""
            if self._refused_origin():
                return
            try:
                length = int(self.headers.get("Content-Length", ""))
            except ValueError:
                return self._reply(411, {"message": "a numeric Content-Length is required"})
            if not 0 <= length <= MAX_BODY_BYTES:
                return self._reply(413, {"message": f"body over {MAX_BODY_BYTES} bytes"})
            # Read before any refusal: closing on an unread body resets the connection.
            body = self.rfile.read(length)
            segments = self._route()
            if segments is None:
                return
            if not self._authorized(segments[:-1]):
                return self._reply(401, {"message": "missing or wrong codec server token"})
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


def serve_codec(
    codec: EncryptionCodec,
    token: str,
    host: str = "127.0.0.1",
    port: int = 8081,
    allowed_origins: Sequence[str] = DEV_UI_ORIGINS,
) -> ThreadingHTTPServer:
    """A bound codec server, not yet serving: call `serve_forever()`; port 0 picks a free one."""
    return ThreadingHTTPServer((host, port), codec_app(codec, token, allowed_origins))
