"""Signing in and out: a password from the users file, a one-time link, or a company's OIDC.

Failed passwords are throttled per name and per address (`Throttle`: 429 with Retry-After).
The sign-in form carries a short-lived token signed over a random value that only this
browser's pre-sign-in cookie holds, and a cross-site post is refused, so another site cannot
sign a browser in as someone else. OIDC goes through authlib (discovery, state, nonce and the
ID token's signature are its work); its state lives in a cookie of its own, for the round trip.
"""

from __future__ import annotations

import asyncio
import secrets
from typing import Annotated, Any
from urllib.parse import quote

import httpx
from fastapi import APIRouter, Depends, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse
from itsdangerous import BadSignature, URLSafeTimedSerializer
from starlette.responses import Response

from waypoint._console.access import Console, console_of, session_of, who
from waypoint._console.audit import address
from waypoint._console.pages import render
from waypoint._console.people import Principal
from waypoint._console.problems import Problem
from waypoint._console.sessions import COOKIE, generation

router = APIRouter(include_in_schema=False)
FORM_SECONDS = 3600
PRE_COOKIE = "waypoint_signin"
"""Holds the random value the sign-in form's token is signed over, until sign-in."""


def _form_tokens(console: Console) -> URLSafeTimedSerializer:
    return URLSafeTimedSerializer(console.sessions.secret, salt="waypoint-console-signin")


def safe_next(target: str) -> str:
    """Where to go after signing in: a path on this console only, never another site."""
    if not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target


def signed_in(
    console: Console, user: str, via: str, target: str = "/", generation: str = ""
) -> Response:
    """Redirect to `target` with a new session cookie."""
    response = RedirectResponse(safe_next(target), status_code=303)
    response.delete_cookie(console.cookie(PRE_COOKIE), secure=console.secure_cookies)
    response.set_cookie(
        console.cookie(COOKIE),
        console.sessions.cookie(user, via, generation),
        max_age=console.sessions.max_age,
        httponly=True,
        samesite="lax",
        secure=console.secure_cookies,
    )
    return response


@router.get("/signin", response_class=HTMLResponse)
async def signin_page(request: Request, next: str = "/", failed: str = "") -> Response:
    """The sign-in form, bound to this browser by a cookie of its own."""
    console = console_of(request)
    nonce = request.cookies.get(console.cookie(PRE_COOKIE)) or secrets.token_urlsafe(18)
    context = {
        "next": safe_next(next),
        "form_token": _form_tokens(console).dumps(nonce),
        "failed": failed[:200],
        "oidc": console.people().oidc is not None,
        "title": "Sign in",
    }
    page = render(request, "signin.html", None, **context)
    page.set_cookie(
        console.cookie(PRE_COOKIE),
        nonce,
        max_age=FORM_SECONDS,
        httponly=True,
        samesite="strict",
        secure=console.secure_cookies,
    )
    return page


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
        nonce = _form_tokens(console).loads(form_token, max_age=FORM_SECONDS)
    except BadSignature:  # a forged token never matches, not even a browser with no cookie
        nonce = None
    cross_site = request.headers.get("sec-fetch-site", "") == "cross-site"
    if nonce is None or nonce != request.cookies.get(console.cookie(PRE_COOKIE)) or cross_site:
        raise Problem(403, "the sign-in form is out of date or from another site: reload it")
    people = console.people()
    keys = [f"address:{address(request)}"] + ([f"user:{user}"] if user in people.users else [])
    named = user if user in people.users else None  # an unknown name may be a typed password
    wait, stamp = console.throttle.reserve(*keys)  # counted before the hash runs
    if wait > 0:
        console.audit.record("signin.failed", request, named, via="password", why="throttled")
        raise Problem(
            429, f"too many failed sign-ins: try again in {wait:.0f} s", retry_after=int(wait) + 1
        )
    found = await asyncio.to_thread(people.check_password, user, password)  # scrypt: ~40 ms
    if found is None:
        console.audit.record("signin.failed", request, named, via="password", why="password")
        return RedirectResponse(f"/signin?failed=1&next={quote(safe_next(next))}", 303)
    console.throttle.release(stamp, *keys)
    console.audit.record("signin", request, found)
    stored = people.users[found.name][0]
    return signed_in(console, found.name, "password", next, generation(stored))


@router.get("/signin/once")
async def signin_once(request: Request, token: str = "") -> Response:
    """A one-time link (`waypoint demo` prints one): signs in once, within minutes."""
    console = console_of(request)
    user = console.once.redeem(token[:200])
    if user is None:
        raise Problem(403, "this sign-in link was used already or has expired")
    console.audit.record("signin", request, user, via="once")
    return signed_in(console, user, "once")


@router.post("/signout")
async def signout(request: Request, principal: Annotated[Principal, Depends(who)]) -> Response:
    """End the session (the form carries the CSRF token, as every change does)."""
    console = console_of(request)
    session = session_of(request)
    if session is not None:
        console.sessions.revoke(session)
    console.audit.record("signout", request, principal)
    response = RedirectResponse("/signin", status_code=303)
    response.delete_cookie(console.cookie(COOKIE), secure=console.secure_cookies)
    return response


def oidc_client(console: Console) -> Any:
    """The users file's provider as an authlib client, made once per provider."""
    from authlib.integrations.starlette_client import OAuth  # loads cryptography: here only

    oidc = console.people().oidc
    if oidc is None:
        raise Problem(404, "this console has no identity provider configured ([oidc])")
    key = (oidc.issuer, oidc.client_id, oidc.client_secret)
    if key not in _clients:
        oauth = OAuth()
        oauth.register(
            "company",
            client_id=oidc.client_id,
            client_secret=oidc.client_secret,
            server_metadata_url=oidc.issuer.rstrip("/") + "/.well-known/openid-configuration",
            client_kwargs={"scope": "openid email profile"},
        )
        _clients.clear()
        _clients[key] = oauth.company
    return _clients[key]


_clients: dict[tuple[str, str, str], Any] = {}


@router.get("/signin/oidc")
async def signin_oidc(request: Request) -> Response:
    """Off to the company's identity provider."""
    company = oidc_client(console_of(request))
    callback = str(request.url_for("signin_oidc_callback"))
    try:
        return await company.authorize_redirect(request, callback)
    except httpx.HTTPError as err:
        raise Problem(503, f"the identity provider did not answer: {type(err).__name__}") from None


@router.get("/signin/oidc/callback", name="signin_oidc_callback")
async def signin_oidc_callback(request: Request) -> Response:
    """Back from the identity provider: whom it names, if the users file gives them a role."""
    from authlib.integrations.base_client import OAuthError
    from joserfc.errors import JoseError

    console = console_of(request)
    company = oidc_client(console)
    try:
        token = await company.authorize_access_token(request)
    except OAuthError as err:
        raise Problem(403, f"the identity provider did not sign you in: {err.error}") from None
    except JoseError as err:
        raise Problem(403, f"the identity provider's token does not hold: {err.error}") from None
    except httpx.HTTPError as err:
        raise Problem(503, f"the identity provider did not answer: {type(err).__name__}") from None
    oidc = console.people().oidc
    found = oidc.principal(token.get("userinfo") or {}) if oidc else None
    if found is None:
        raise Problem(403, "you are signed in there, but this console gives you no role")
    console.audit.record("signin", request, found)
    return signed_in(console, found.name, "oidc")
