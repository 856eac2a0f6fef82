"""`GET /api/runs/{run}/attachments/{number}`: one of the files a run was started with.

Read back from the run's recorded input (the payload store's copy for a large one), for
anyone who may view the run. An image opens in place; anything else downloads. The bytes are
the run's, not the console's: they come with a policy that lets them run nothing.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Request
from starlette.responses import Response

from waypoint._console.access import allowed, console_of, who
from waypoint._console.api import RunId
from waypoint._console.people import Principal
from waypoint._console.problems import Problem, responses
from waypoint.client import attachments, evidence, views

router = APIRouter(prefix="/api", tags=["runs"], responses=responses(401, 403, 422, 503))
Who = Annotated[Principal, Depends(who)]
MAX_ATTACHMENTS = 1000
SANDBOX = "sandbox; default-src 'none'; img-src 'self'; style-src 'unsafe-inline'"
"""Whatever the file holds, it runs no script and reaches nothing when opened."""
FILES = {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}


@router.get(
    "/runs/{run}/attachments/{number}",
    response_class=Response,
    responses={200: {"content": FILES, "description": "The file"}, **responses(404)},
)
async def attachment(
    principal: Who,
    request: Request,
    run: RunId,
    number: Annotated[int, Path(ge=1, le=MAX_ATTACHMENTS)],
) -> Response:
    """The run's attachment `number` (from 1), as it was given (viewer)."""
    await allowed(request, principal, "viewer", run)
    client = console_of(request).client
    latest = await views.describe(client, run)
    found = await evidence.read(client, run, latest.run_id)
    if number > len(found.given):
        why = f": {found.note}" if found.note else ""
        raise Problem(404, f"run {run!r} has no attachment {number}{why}")
    try:
        opened = attachments.opened(found.given[number - 1], number)
    except ValueError as err:
        raise Problem(404, f"attachment {number} cannot be opened: {err}") from None
    shown = "inline" if opened.media_type in attachments.INLINE else "attachment"
    headers = {
        "content-disposition": f'{shown}; filename="{opened.name}"',
        "content-security-policy": SANDBOX,
    }
    return Response(opened.data, media_type=opened.media_type, headers=headers)
