"""Refusals as RFC 9457 problem details: a status, a title, and a detail a person can act on.

Every error the API meets becomes one: a malformed body or query is 422 with the fields that
failed, a run that does not exist 404, a decision the run no longer waits for 409, a Temporal
server out of reach 503. Nothing a user sends yields a 500.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic_core import PydanticSerializationError
from starlette.exceptions import HTTPException
from starlette.responses import Response
from temporalio.client import WorkflowQueryFailedError
from temporalio.service import RPCError, RPCStatusCode

from waypoint.errors import (
    AgentNotHostedError,
    ContentError,
    DecisionRefusedError,
    RunClosedError,
    RunIdTakenError,
    RunNotFoundError,
    RunStuckError,
    StepNotPendingError,
    WaypointError,
)

logger = logging.getLogger(__name__)
MEDIA_TYPE = "application/problem+json"
STATUS_OF: dict[type[WaypointError], int] = {
    RunNotFoundError: 404,
    StepNotPendingError: 409,
    DecisionRefusedError: 409,
    RunClosedError: 409,
    RunIdTakenError: 409,
    AgentNotHostedError: 422,
    ContentError: 422,
    RunStuckError: 503,
}
TITLES = {
    400: "Bad request",
    401: "Sign in first",
    403: "Not allowed",
    404: "Not found",
    405: "Method not allowed",
    409: "Conflict",
    413: "Too large",
    415: "Unsupported media type",
    422: "Invalid input",
    429: "Too many tries",
    503: "Unavailable",
}


SCHEMA: dict[str, Any] = {
    "type": "object",
    "title": "Problem",
    "description": "An RFC 9457 problem document.",
    "required": ["type", "title", "status", "detail"],
    "properties": {
        "type": {"type": "string"},
        "title": {"type": "string"},
        "status": {"type": "integer"},
        "detail": {"type": "string"},
        "errors": {
            "type": "array",
            "description": "For 422: each field that failed, and why.",
            "items": {"type": "object", "additionalProperties": {"type": "string"}},
        },
        "retry_after": {"type": "integer", "description": "For 429 and 503: seconds to wait."},
    },
}


def responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """The OpenAPI `responses` entries for refusals with these statuses: problem documents."""
    return {
        status: {"description": TITLES[status], "content": {MEDIA_TYPE: {"schema": SCHEMA}}}
        for status in statuses
    }


class Problem(Exception):
    """Raise to answer with a problem document."""

    def __init__(self, status: int, detail: str, **extra: Any) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.extra = extra


def problem(status: int, detail: str, **extra: Any) -> JSONResponse:
    """A problem response; `extra` members go beside the standard ones."""
    body = {
        "type": "about:blank",
        "title": TITLES.get(status, "Error"),
        "status": status,
        "detail": detail,
        **extra,
    }
    headers = {}
    if "retry_after" in extra:
        headers["Retry-After"] = str(extra["retry_after"])
    if challenge := body.pop("www_authenticate", None):
        headers["WWW-Authenticate"] = challenge
    return JSONResponse(body, status_code=status, media_type=MEDIA_TYPE, headers=headers)


def status_of(err: WaypointError) -> int:
    """The HTTP status a Waypoint error is answered with (422 for any other refusal)."""
    for kind, status in STATUS_OF.items():
        if isinstance(err, kind):
            return status
    return 422


Page = Callable[[Request, int, str], Awaitable[Response | None]]
"""Renders a refusal as a page for a browser; None leaves it a problem document."""


Refused = Callable[[Request, int, str], None]
"""Told of every refusal with a status it watches (the audit log's 403s)."""


def install(app: FastAPI, page: Page | None = None, refused: Refused | None = None) -> None:
    """Answer every error the app meets as a problem document (or `page`'s, for pages)."""

    async def answer(
        request: Request, status: int, detail: str, headers: Any = None, **extra: Any
    ) -> Response:
        if refused is not None and status == 403:
            refused(request, status, detail)
        shown = await page(request, status, detail) if page else None
        if shown is not None and "retry_after" in extra:
            shown.headers["Retry-After"] = str(extra["retry_after"])
        shown = shown or problem(status, detail, **extra)
        shown.headers.update(headers or {})  # e.g. a 405's Allow
        return shown

    async def on_problem(request: Request, err: Exception) -> Response:
        assert isinstance(err, Problem)
        return await answer(request, err.status, err.detail, **err.extra)

    async def on_http(request: Request, err: Exception) -> Response:
        assert isinstance(err, HTTPException)
        if err.status_code == 400 and isinstance(err.__cause__, ValueError):
            # FastAPI's answer to a body that is not text (a JSON body that does not decode)
            return await answer(request, 422, f"the body does not read as JSON: {err.__cause__}")
        return await answer(request, err.status_code, str(err.detail), err.headers)

    async def on_invalid(request: Request, err: Exception) -> Response:
        assert isinstance(err, RequestValidationError)
        errors = [
            {"where": ".".join(str(p) for p in e.get("loc", ())), "problem": e.get("msg", "")}
            for e in err.errors()
        ]
        where = "; ".join(f"{e['where']}: {e['problem']}" for e in errors[:5])
        return await answer(request, 422, f"the request does not fit: {where}", errors=errors)

    async def on_waypoint(request: Request, err: Exception) -> Response:
        assert isinstance(err, WaypointError)
        return await answer(request, status_of(err), str(err))

    async def on_query(request: Request, err: Exception) -> Response:
        return await answer(request, 409, f"the run refused the question: {err}")

    async def on_rpc(request: Request, err: Exception) -> Response:
        assert isinstance(err, RPCError)
        if err.status == RPCStatusCode.NOT_FOUND:
            return await answer(request, 404, "no such run")
        if err.status == RPCStatusCode.INVALID_ARGUMENT:
            return await answer(request, 422, f"Temporal refused the request: {err.message}")
        logger.warning("Temporal call failed: %s", err.message)
        detail = "the Temporal server did not answer; try again"
        return await answer(request, 503, detail, retry_after=2)

    async def on_crash(request: Request, err: Exception) -> Response:
        logger.exception("console error on %s %s", request.method, request.url.path)
        return problem(500, "the console failed on this request; it is logged")

    app.add_exception_handler(Exception, on_crash)
    app.add_exception_handler(Problem, on_problem)
    app.add_exception_handler(HTTPException, on_http)
    app.add_exception_handler(RequestValidationError, on_invalid)
    app.add_exception_handler(WaypointError, on_waypoint)
    app.add_exception_handler(WorkflowQueryFailedError, on_query)
    app.add_exception_handler(RPCError, on_rpc)

    async def on_unsendable(request: Request, err: Exception) -> Response:
        return await answer(request, 422, f"the request holds what cannot be sent on: {err}")

    app.add_exception_handler(PydanticSerializationError, on_unsendable)
