"""The console's ASGI app: the API, the pages, sign-in, and the rules every response keeps.

Every response, the mounted codec server's included, says not to be framed, sniffed or cached,
and pages may run only the console's own script and style (a Content-Security-Policy); behind
TLS (`secure`) each also says to use HTTPS only (HSTS). A request body larger than `MAX_BODY`
(`CODEC_MAX_BODY` under `/codec`) is refused (413) before it is read whole, whatever its
`Content-Length` claims.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from starlette.exceptions import HTTPException
from starlette.middleware.sessions import SessionMiddleware
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from waypoint._console import api, attachments, forms, lists, pages, problems, review, signin
from waypoint._console.access import Console
from waypoint._operations.codec_server import MAX_BODY_BYTES as CODEC_MAX_BODY

MAX_BODY = 1024 * 1024
HSTS = (b"strict-transport-security", b"max-age=31536000")
HEADERS = [
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
    (b"cache-control", b"no-store"),
    (
        b"content-security-policy",
        b"default-src 'self'; script-src 'self'; style-src 'self'; style-src-attr 'unsafe-inline'; "
        b"img-src 'self' data:; "
        b"frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
    ),
]


class Guard:
    """ASGI middleware: the security headers on every response, and the body size cap."""

    def __init__(
        self,
        app: ASGIApp,
        max_body: int = MAX_BODY,
        *,
        codec_max_body: int = CODEC_MAX_BODY,
        secure: bool = False,
    ) -> None:
        self.app = app
        self.max_body = max_body
        self.codec_max_body = codec_max_body
        self.headers = [*HEADERS, HSTS] if secure else HEADERS

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Refuse an oversized body; add the headers to whatever the app answers."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        cap = self.codec_max_body if scope["path"].startswith("/codec") else self.max_body
        headed = _headed(send, self.headers)
        declared = dict(scope["headers"]).get(b"content-length", b"0")
        if not declared.isdigit() or int(declared) > cap:
            await problems.problem(413, f"the body is over {cap} bytes")(scope, receive, headed)
            return
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > cap:  # an HTTPException: FastAPI passes it on from a body read
                raise HTTPException(413, f"the body is over {cap} bytes")
            return message

        await self.app(scope, counted, headed)


def _headed(send: Send, headers: list[tuple[bytes, bytes]]) -> Send:
    async def with_headers(message: Message) -> None:
        if message["type"] == "http.response.start":
            have = {name.lower() for name, _ in message.get("headers", [])}
            extra = [(k, v) for k, v in headers if k not in have]
            message = {**message, "headers": [*message.get("headers", []), *extra]}
        await send(message)

    return with_headers


def build_app(console: Console, codec: Any = None) -> FastAPI:
    """The console for `console`; `codec`: an ASGI codec server app, served under `/codec`."""
    app = FastAPI(
        title="Waypoint console",
        summary="Runs, approvals and their cost: decide and watch durable Claude agents.",
        version="1",
        openapi_url="/api/openapi.json",
        docs_url=None,
        redoc_url=None,
    )
    app.state.console = console

    def forbidden(request: Request, status: int, detail: str) -> None:
        who = getattr(request.state, "principal", None)
        where = f"{request.method} {request.url.path}"
        console.audit.record("forbidden", request, who, status=status, path=where, detail=detail)

    problems.install(app, pages.error_page, forbidden)
    app.include_router(lists.router)
    app.include_router(api.router)
    app.include_router(attachments.router)
    app.include_router(signin.router)
    app.include_router(review.router)
    app.include_router(pages.router)
    app.include_router(forms.router)
    app.mount("/static", StaticFiles(directory=pages.HERE / "static"), name="static")
    if codec is not None:
        app.mount("/codec", codec)
    app.add_middleware(
        SessionMiddleware,
        secret_key=console.sessions.secret,
        session_cookie=console.cookie("waypoint_oidc"),
        max_age=600,
        same_site="lax",
        https_only=console.secure_cookies,
    )
    app.add_middleware(Guard, secure=console.secure_cookies)
    return app
