"""The codec server: lets the Web UI and the `temporal` CLI decrypt payloads for display.

It follows the codec server protocol: Payloads as proto3 JSON in and out; the final path
segment picks ``encode`` or ``decode``, so ``/{namespace}/decode`` works too; query strings
are ignored. External-storage references pass through ``/decode`` unchanged, which is what the
UI asks for with ``?preserveStorageRefs=true``; ``/download`` (the UI's "show the stored
payload") is not served.

It is one ASGI app, `codec_asgi_app`, on the stack the console uses: the console mounts it at
a path prefix (paths are read relative to the mount), and `serve_codec` serves it alone on
uvicorn::

    server = serve_codec(codec, token, "127.0.0.1", 8081)
    server.start()  # serving from a thread once it returns; server.stop() ends it

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

Refusals cost nothing: the origin, the path, the token and the declared ``Content-Length`` are
all checked before a byte of the body is read, a chunked body is refused as soon as it passes
``MAX_BODY_BYTES``, and at most ``max_in_flight`` requests are in the app at once (the rest get
503 at once), so memory stays bounded whatever unauthenticated clients send. The body of a
refused request is read and dropped by uvicorn, never kept, so the client reads the refusal
instead of a connection reset. Neither the path (which may hold the token) nor the token is
ever logged: uvicorn's access log is off.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import socket
import stat
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import uvicorn
from google.protobuf import json_format
from google.protobuf.message import DecodeError
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send
from temporalio.api.common.v1 import Payloads
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.server import ServerState

from waypoint._security.codec import EncryptionCodec, EncryptionKeyError, PayloadDecryptionError
from waypoint.errors import WaypointError

logger = logging.getLogger(__name__)
DEV_UI_ORIGINS = ("http://localhost:8233", "http://127.0.0.1:8233")
MAX_BODY_BYTES = 4 * 1024 * 1024
"""The Web UI decodes one event field's payloads per request, and Temporal refuses a field over
2 MiB: encrypted, base64'd and in JSON, that is under 3 MiB. With `MAX_IN_FLIGHT`, this bounds
what bodies can hold in memory at once."""
MAX_IN_FLIGHT = 4
ENDPOINTS = ("encode", "decode")
ALLOW_HEADERS = "Authorization, Authorization-Extras, Content-Type, X-Namespace"
START_SECONDS = 10.0
"""How long `CodecServer.start` waits for uvicorn to take its socket before giving up."""


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


class _InFlightLimit:
    """ASGI middleware: a request beyond `limit` in the app at once gets 503 at once."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit
        self.in_flight = 0
        """Requests in the app now; one event loop serves them all, so a plain count is safe."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on if a slot is free; otherwise answer 503 without reading it."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self.in_flight >= self.limit:
            busy = {"message": "codec server busy; retry in a moment"}
            await JSONResponse(busy, 503, headers={"Retry-After": "1"})(scope, receive, send)
            return
        self.in_flight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_flight -= 1


def codec_asgi_app(
    codec: EncryptionCodec,
    token: str,
    allowed_origins: Sequence[str] = DEV_UI_ORIGINS,
    namespace: str | None = None,
    *,
    max_in_flight: int = MAX_IN_FLIGHT,
) -> Starlette:
    """A Starlette app serving the codec server protocol for `codec`, behind `token`.

    Mounted under a prefix, it reads paths relative to the mount. With `namespace`, a request
    whose `X-Namespace` names another namespace is refused, and one naming none (neither the
    header nor a `/{namespace}/` path segment) too: the keys belong to the namespace of the
    connection profile the server was started with.
    """
    if not token:
        raise ValueError("the codec server needs a non-empty token")
    if max_in_flight < 1:
        raise ValueError("max_in_flight must be at least 1")
    secret = token.encode()
    origins = frozenset(origin.rstrip("/") for origin in allowed_origins)

    def cors(request: Request, preflight: bool = False) -> dict[str, str]:
        """The CORS headers for an allowed origin; none for another or for no browser."""
        origin = request.headers.get("Origin")
        if origin is None or origin not in origins:
            return {}
        headers = {
            "Access-Control-Allow-Origin": origin,
            "Access-Control-Allow-Credentials": "true",
            "Vary": "Origin",
        }
        if preflight:
            headers["Access-Control-Allow-Methods"] = "POST, OPTIONS"
            headers["Access-Control-Allow-Headers"] = ALLOW_HEADERS
            headers["Access-Control-Max-Age"] = "600"
            # Chrome asks this when a public page (e.g. Temporal Cloud's UI) calls loopback.
            if request.headers.get("Access-Control-Request-Private-Network") == "true":
                headers["Access-Control-Allow-Private-Network"] = "true"
        return headers

    def refuse(request: Request, status: int, message: str) -> Response:
        """A refusal as JSON that says what is wrong, with the CORS headers a browser needs."""
        headers = cors(request)
        if status == 401:
            headers["WWW-Authenticate"] = 'Bearer realm="waypoint-codec"'
        return JSONResponse({"message": message}, status, headers=headers)

    def authorized(request: Request, prefix: Sequence[str]) -> bool:
        """Whether the bearer header or a path segment before the endpoint is the token."""
        authorization = request.headers.get("Authorization", "")
        scheme, _, credential = authorization.strip().partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(credential.strip().encode(), secret):
            return True
        return any(hmac.compare_digest(s.encode(), secret) for s in prefix)

    def convert(body: bytearray, endpoint: str) -> tuple[int, bytes]:
        """Parse, encrypt or decrypt, and serialize: CPU work, so it runs off the event loop."""
        try:
            request = json_format.Parse(body.decode(), Payloads(), ignore_unknown_fields=True)
        except (json_format.ParseError, UnicodeDecodeError, RecursionError) as err:
            return 400, json.dumps({"message": f"body is not Payloads JSON: {err}"}).encode()
        transform = codec.encrypt if endpoint == "encode" else codec.decrypt
        try:
            result = Payloads(payloads=[transform(p) for p in request.payloads])
        except (EncryptionKeyError, PayloadDecryptionError) as err:
            return 400, json.dumps({"message": str(err)}).encode()
        except DecodeError:
            return 400, b'{"message": "a decrypted payload is not a Payload"}'
        return 200, json_format.MessageToJson(result, indent=None).encode()

    async def serve(request: Request) -> Response:
        """Answer one request; every refusal comes before the body is read."""
        origin = request.headers.get("Origin")
        if origin is not None and origin not in origins:
            return refuse(request, 403, f"origin {origin} is not allowed")
        segments = [s for s in request.path_params["path"].split("/") if s]
        if not segments or segments[-1] not in ENDPOINTS:
            return refuse(request, 404, "not found; POST to .../encode or .../decode")
        if request.method == "OPTIONS":
            return Response(status_code=204, headers=cors(request, preflight=True))
        if not authorized(request, segments[:-1]):
            return refuse(request, 401, "missing or wrong codec server token")
        asked = request.headers.get("X-Namespace") or None
        if namespace is not None and asked is not None and asked != namespace:
            return refuse(request, 403, f"this codec server serves namespace {namespace}")
        declared = request.headers.get("Content-Length")
        chunked = "chunked" in request.headers.get("Transfer-Encoding", "").lower()
        numeric = declared is not None and declared.strip().isdigit()
        if not numeric and (declared is not None or not chunked):
            return refuse(request, 411, "a numeric Content-Length (or a chunked body) is required")
        if declared is not None and int(declared) > MAX_BODY_BYTES:
            return refuse(request, 413, f"body over {MAX_BODY_BYTES} bytes")
        if namespace is not None and asked is None and namespace not in segments[:-1]:
            # Keys belong to one namespace: a request must say which one it decodes for.
            return refuse(request, 400, f"name the namespace: X-Namespace: {namespace}")
        body = bytearray()
        try:
            async for chunk in request.stream():
                body += chunk
                if len(body) > MAX_BODY_BYTES:  # a chunked body declares no length up front
                    return refuse(request, 413, f"body over {MAX_BODY_BYTES} bytes")
        except ClientDisconnect:
            return Response(status_code=400)  # nobody is left to read it
        status, content = await run_in_threadpool(convert, body, segments[-1])
        return Response(content, status, headers=cors(request), media_type="application/json")

    async def endpoint(request: Request) -> Response:
        """Serve, then log the method and status only: the path may hold the token."""
        response = await serve(request)
        logger.debug("codec server %s %s", request.method, response.status_code)
        return response

    async def routing_refusal(request: Request, exc: Exception) -> Response:
        """Starlette's own refusals (a method other than POST or OPTIONS) as JSON too."""
        if not isinstance(exc, HTTPException):  # registered for HTTPException only
            raise exc
        message = f"{exc.detail}; POST to .../encode or .../decode"
        return JSONResponse({"message": message}, exc.status_code, headers=exc.headers)

    return Starlette(
        routes=[Route("/{path:path}", endpoint, methods=["POST", "OPTIONS"])],
        middleware=[Middleware(_InFlightLimit, limit=max_in_flight)],
        exception_handlers={HTTPException: routing_refusal},
    )


class QuietH11(H11Protocol):
    """uvicorn's HTTP/1.1 protocol with no access log, whatever handlers `uvicorn.access` has.

    uvicorn's own `access_log=False` only empties that logger's handlers, and it logs again as
    soon as anyone (a program's logging setup, a console's uvicorn, pytest) adds one: it would
    log request paths, and a path may hold the token.
    """

    def __init__(
        self,
        config: uvicorn.Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self.access_log = False


class _Uvicorn(uvicorn.Server):
    """uvicorn's server that says when it is listening and stops without waiting on clients."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.ready = threading.Event()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        """Start serving; then, or on failure, wake whoever waits in `CodecServer.start`."""
        try:
            await super().startup(sockets)
        finally:
            self.ready.set()

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        """Stop accepting, drop every open connection, then shut down as uvicorn does.

        Stopping does not wait for requests in flight: a Web UI asks again, and a client that
        holds a connection open must not keep the server from exiting.
        """
        for server in getattr(self, "servers", []):
            server.close()
        for connection in list(self.server_state.connections):
            connection.transport.abort()
        await super().shutdown(sockets)


class CodecServer:
    """The codec app bound to a socket: `start()` serves it from a thread, `stop()` ends it."""

    def __init__(self, app: ASGIApp, host: str = "127.0.0.1", port: int = 8081) -> None:
        """Bind `host`:`port` at once (port 0 picks a free one); raises OSError if taken."""
        self._socket = socket.create_server((host, port))
        self.host = host
        self.port: int = self._socket.getsockname()[1]
        """The port bound, also when port 0 was asked for."""
        config = uvicorn.Config(
            app,
            http=QuietH11,
            loop="asyncio",
            ws="none",
            lifespan="off",
            log_config=None,  # leave the program's logging alone
            access_log=False,  # and QuietH11 keeps it off: it would log the token in a path
            server_header=False,
            proxy_headers=False,
        )
        self._server = _Uvicorn(config)
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """The server's base URL."""
        return f"http://{self.host}:{self.port}"

    def start(self) -> None:
        """Serve from a daemon thread; returns once uvicorn is accepting on the socket."""
        if self._thread is not None:
            raise RuntimeError("the codec server is already started")
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._socket]}, name="codec-server"
        )
        self._thread.daemon = True
        self._thread.start()
        if not self._server.ready.wait(START_SECONDS) or not self._server.started:
            self.stop()
            raise RuntimeError(f"the codec server on {self.url} did not start")

    def stop(self) -> None:
        """Stop serving, drop open connections and join the thread; safe to call twice."""
        if self._thread is None:
            self._socket.close()
            return
        self._server.should_exit = True
        self._thread.join(timeout=30)
        self._socket.close()

    def __enter__(self) -> CodecServer:
        """Start serving."""
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        """Stop serving."""
        self.stop()


def serve_codec(
    codec: EncryptionCodec,
    token: str,
    host: str = "127.0.0.1",
    port: int = 8081,
    allowed_origins: Sequence[str] = DEV_UI_ORIGINS,
    max_in_flight: int = MAX_IN_FLIGHT,
    namespace: str | None = None,
) -> CodecServer:
    """A codec server bound to `host`:`port`, not yet serving: call `start()`."""
    app = codec_asgi_app(codec, token, allowed_origins, namespace, max_in_flight=max_in_flight)
    return CodecServer(app, host, port)
