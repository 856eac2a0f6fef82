"""Signing in and out: a password from the users file, a one-time link, or a company's OIDC.

Failed passwords are throttled per name and per address (`Throttle`: 429 with Retry-After).
The sign-in form carries a short-lived signed token, so another site cannot sign a browser in
as someone else. OIDC goes through authlib (discovery, state, nonce and the ID token's
signature are its work); its state lives in a cookie of its own, only for the round trip.
"""

from __future__ import annotations

import logging
from typing import Annotated

from authlib.integrations.starlette_client import OAuth, OAuthError
from fastapi import APIRouter, Depends, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse
from itsdangerous import BadSignature, URLSafeTimedSerializer
from starlette.responses import Response

from waypoint.console.access import Console, console_of, who
from waypoint.console.pages import render
from waypoint.console.people import Principal
from waypoint.console.problems import Problem
from waypoint.console.sessions import COOKIE

logger = logging.getLogger(__name__)
router = APIRouter(include_in_schema=False)
FORM_SECONDS = 3600


def _form_tokens(console: Console) -> URLSafeTimedSerializer:
    return URLSafeTimedSerializer(console.sessions.secret, salt="waypoint-console-signin")


def safe_next(target: str) -> str:
    """Where to go after signing in: a path on this console only, never another site."""
    if not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target


def signed_in(console: Console, user: str, via: str, target: str = "/") -> Response:
    """Redirect to `target` with a new session cookie."""
    response = RedirectResponse(safe_next(target), status_code=303)
    response.set_cookie(
        COOKIE,
        console.sessions.cookie(user, via),
        max_age=console.sessions.max_age,
        httponly=True,
        samesite="lax",
        secure=console.secure_cookies,
    )
    return response


@router.get("/signin", response_class=HTMLResponse)
async def signin_page(request: Request, next: str = "/", failed: str = "") -> Response:
    """The sign-in form."""
    console = console_of(request)
    context = {
        "next": safe_next(next),
        "form_token": _form_tokens(console).dumps("signin"),
        "failed": failed[:200],
        "oidc": console.people().oidc is not None,
        "title": "Sign in",
    }
    return render(request, "signin.html", None, **context)


@router.post("/signin")
async def signin(
    request: Request,
    user: Annotated[str, Form(min_length=1, max_length=200)],
    password: Annotated[str, Form(min_length=1, max_length=1000)],
    form_token: Annotated[str, Form(max_length=500)],
    next: Annotated[str, Form(max_length=2000)] = "/",
) -> Response:
    """Check a password; too many failures for a name or an address wait a while."""
    console = console_of(request)
    try:
        _form_tokens(console).loads(form_token, max_age=FORM_SECONDS)
    except BadSignature:
        raise Problem(403, "the sign-in form is out of date: reload it") from None
    address = request.client.host if request.client else "?"
    keys = (f"user:{user}", f"address:{address}")
    wait = console.throttle.wait(*keys)
    if wait > 0:
        raise Problem(
            429, f"too many failed sign-ins: try again in {wait:.0f} s", retry_after=int(wait) + 1
        )
    found = console.people().check_password(user, password)
    if found is None:
        console.throttle.failed(*keys)
        logger.info("console sign-in failed for a name from %s", address)
        return RedirectResponse(f"/signin?failed=1&next={safe_next(next)}", status_code=303)
    return signed_in(console, found.name, "password", next)


@router.get("/signin/once")
async def signin_once(request: Request, token: str = "") -> Response:
    """A one-time link (`waypoint demo` prints one): signs in once, within minutes."""
    console = console_of(request)
    user = console.once.redeem(token[:200])
    if user is None:
        raise Problem(403, "this sign-in link was used already or has expired")
    return signed_in(console, user, "once")


@router.post("/signout")
async def signout(request: Request, principal: Annotated[Principal, Depends(who)]) -> Response:
    """Forget the session (the form carries the CSRF token, as every change does)."""
    response = RedirectResponse("/signin", status_code=303)
    response.delete_cookie(COOKIE)
    return response


def oidc_client(console: Console) -> OAuth | None:
    """The users file's provider as an authlib client, made on first use."""
    oidc = console.people().oidc
    if oidc is None:
        return None
    oauth = OAuth()
    oauth.register(
        "company",
        client_id=oidc.client_id,
        client_secret=oidc.client_secret,
        server_metadata_url=oidc.issuer.rstrip("/") + "/.well-known/openid-configuration",
        client_kwargs={"scope": "openid email profile"},
    )
    return oauth


@router.get("/signin/oidc")
async def signin_oidc(request: Request) -> Response:
    """Off to the company's identity provider."""
    oauth = oidc_client(console_of(request))
    if oauth is None:
        raise Problem(404, "this console has no identity provider configured ([oidc])")
    callback = request.url_for("signin_oidc_callback")
    return await oauth.company.authorize_redirect(request, str(callback))  # type: ignore[union-attr]


@router.get("/signin/oidc/callback", name="signin_oidc_callback")
async def signin_oidc_callback(request: Request) -> Response:
    """Back from the identity provider: whom it names, if the users file gives them a role."""
    console = console_of(request)
    oauth = oidc_client(console)
    if oauth is None:
        raise Problem(404, "this console has no identity provider configured ([oidc])")
    try:
        token = await oauth.company.authorize_access_token(request)  # type: ignore[union-attr]
    except OAuthError as err:
        raise Problem(403, f"the identity provider did not sign you in: {err.error}") from None
    claims = token.get("userinfo") or {}
    oidc = console.people().oidc
    found = oidc.principal(claims) if oidc else None
    if found is None:
        raise Problem(403, "you are signed in there, but this console gives you no role")
    return signed_in(console, found.name, "oidc")
