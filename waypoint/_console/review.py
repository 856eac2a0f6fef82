"""`GET /r/{token}`: a notice's review link, signing its person in once and opening the run.

The token is signed with the console's secret by the worker that sent the notice
(`waypoint._notify.links`). A link bound to a person is burned on first use, in the sessions
file every replica shares, so a second use (a forwarded e-mail, a browser's history) is
refused; so are a forged, changed or expired one, each with a page that says which. The person
is looked up as they are now: someone removed from the users file is not signed in. A link
that names nobody (a shared channel's) signs nobody in: it opens the run page behind the usual
sign-in.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse
from starlette.responses import Response

from waypoint._console.access import console_of
from waypoint._console.people import NAME
from waypoint._console.problems import Problem
from waypoint._console.sessions import generation
from waypoint._console.signin import signed_in
from waypoint._notify.links import read_link

router = APIRouter(include_in_schema=False)


@router.get("/r/{token}")
async def review(request: Request, token: str) -> Response:
    """Check, burn and follow a review link: signed in, on the run's page."""
    console = console_of(request)
    claim = read_link(console.sessions.secret, token[:2000])
    if isinstance(claim, str) or not NAME.match(claim.run):
        console.audit.record("signin.failed", request, None, via="review-link", why="invalid")
        raise Problem(403, claim if isinstance(claim, str) else "this review link is not valid")
    target = f"/runs/{claim.run}"
    if not claim.person:
        return RedirectResponse(target, status_code=303)
    if not console.used_links.burn(claim.nonce):
        console.audit.record("signin.failed", request, claim.person, via="review-link", why="used")
        raise Problem(403, "this review link was used already: sign in, or use the newest notice")
    people = console.people()
    if claim.person in people.users:
        console.audit.record("signin", request, claim.person, via="review-link", run=claim.run)
        made = generation(people.users[claim.person][0])
        return signed_in(console, claim.person, "link", target, made)
    if people.oidc is not None and people.oidc.roles_of(claim.person):
        console.audit.record("signin", request, claim.person, via="review-link", run=claim.run)
        return signed_in(console, claim.person, "oidc", target)
    console.audit.record("signin.failed", request, claim.person, via="review-link", why="unknown")
    raise Problem(403, "this review link is for someone this console no longer knows: sign in")
