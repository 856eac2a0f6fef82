"""Sign-in through a company's OpenID Connect provider, with authlib on the console's side.

The provider is a small real one on a local port: discovery, an authorize endpoint that signs
the person in at once, a token endpoint handing out an RS256 ID token (joserfc), and its keys.
The console checks state, nonce, issuer, audience and signature (authlib's work) and gives the
person the roles the users file lists for their e-mail.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx
import pytest
import uvicorn
from joserfc import jwt
from joserfc.jwk import RSAKey
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse
from starlette.routing import Route
from temporalio.client import Client

from waypoint._console.access import Console
from waypoint._console.audit import Audit
from waypoint._console.serve import RunningConsole, start_console
from waypoint._console.sessions import Sessions

CLIENT_ID = "waypoint-console"


async def serve(app: Starlette) -> tuple[uvicorn.Server, asyncio.Task[None], int]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        await asyncio.sleep(0.02)
    return server, task, sock.getsockname()[1]


def provider(issuer: list[str], who: dict) -> Starlette:
    """An identity provider that signs `who["email"]` in, whoever asks."""
    key = RSAKey.generate_key(2048, parameters={"kid": "k1"})
    nonces: dict[str, str] = {}

    async def discovery(_: Request) -> JSONResponse:
        base = issuer[0]
        return JSONResponse(
            {
                "issuer": base,
                "authorization_endpoint": f"{base}/authorize",
                "token_endpoint": f"{base}/token",
                "jwks_uri": f"{base}/jwks",
                "id_token_signing_alg_values_supported": ["RS256"],
            }
        )

    async def authorize(request: Request) -> RedirectResponse:
        q = request.query_params
        assert q["client_id"] == CLIENT_ID and q["response_type"] == "code"
        nonces["code-1"] = q["nonce"]
        back = urlencode({"code": "code-1", "state": q["state"]})
        return RedirectResponse(f"{q['redirect_uri']}?{back}", status_code=302)

    async def token(request: Request) -> JSONResponse:
        form = await request.form()
        nonce = nonces.pop(str(form["code"]), None)
        if nonce is None:
            return JSONResponse({"error": "invalid_grant"}, status_code=400)
        now = int(time.time())
        claims = {
            "iss": issuer[0],
            "aud": CLIENT_ID,
            "sub": "u-1",
            "email": who["email"],
            "email_verified": who.get("verified", True),
            "nonce": nonce,
            "iat": now,
            "exp": now + 300,
        }
        id_token = jwt.encode({"alg": "RS256", "kid": "k1"}, claims, key)
        return JSONResponse({"access_token": "at", "token_type": "Bearer", "id_token": id_token})

    async def jwks(_: Request) -> JSONResponse:
        return JSONResponse({"keys": [key.as_dict(private=False)]})

    return Starlette(
        routes=[
            Route("/.well-known/openid-configuration", discovery),
            Route("/authorize", authorize),
            Route("/token", token, methods=["POST"]),
            Route("/jwks", jwks),
        ]
    )


@pytest.fixture
async def company(client: Client, tmp_path: Path) -> AsyncIterator[tuple[RunningConsole, dict]]:
    issuer: list[str] = []
    who: dict = {"email": "carol@example.com"}
    server, task, port = await serve(provider(issuer, who))
    issuer.append(f"http://127.0.0.1:{port}")
    users = tmp_path / "users.toml"
    users.write_text(
        "[oidc]\n"
        f'issuer = "{issuer[0]}"\n'
        f'client_id = "{CLIENT_ID}"\n'
        'client_secret_env = "OIDC_SECRET"\n'
        'roles = { "carol@example.com" = { "*" = "approver" } }\n'
    )
    console = Console(
        client=client,
        people_file=users,
        sessions=Sessions("test-secret"),
        env={"OIDC_SECRET": "s3cret"},
        audit=Audit(path=tmp_path / "audit.jsonl"),
    )
    running = await start_console(console, port=0)
    try:
        yield running, who
    finally:
        await running.stop()
        server.should_exit = True
        await task


async def sign_in(http: httpx.AsyncClient) -> httpx.Response:
    """Follow the round trip to the provider and back by hand, as a browser would."""
    start = await http.get("/signin/oidc")
    assert start.status_code == 302, start.text
    at_provider = await http.get(start.headers["location"])
    assert at_provider.status_code == 302
    return await http.get(at_provider.headers["location"])


async def test_a_person_the_provider_names_signs_in_with_the_roles_listed(company) -> None:
    running, _ = company
    async with httpx.AsyncClient(base_url=running.url(), timeout=30) as http:
        assert "company account" in (await http.get("/signin")).text
        back = await sign_in(http)
        assert back.status_code == 303 and back.headers["location"] == "/", back.text
        me = (await http.get("/api/me")).json()
    assert me == {"name": "carol@example.com", "via": "oidc", "roles": {"*": "approver"}}
    (line,) = audited(running)
    assert (line["event"], line["who"], line["via"]) == ("signin", "carol@example.com", "oidc")


async def test_someone_without_a_role_or_a_forged_state_is_refused(company) -> None:
    running, who = company
    async with httpx.AsyncClient(base_url=running.url(), timeout=30) as http:
        who["email"] = "mallory@example.com"
        refused = await sign_in(http)
        assert refused.status_code == 403 and "no role" in refused.text
        assert (await http.get("/api/me")).status_code == 401
        start = await http.get("/signin/oidc")
        at_provider = await http.get(start.headers["location"])
        back = urlsplit(at_provider.headers["location"])
        forged = {**parse_qs(back.query), "state": ["forged"]}
        query = urlencode({k: v[0] for k, v in forged.items()})
        answer = await http.get(f"{back.path}?{query}")
        assert answer.status_code == 403 and "did not sign you in" in answer.text
    refusals = [(line["event"], line["path"], line["detail"]) for line in audited(running)]
    assert [(event, path) for event, path, _ in refusals] == [
        ("forbidden", "GET /signin/oidc/callback"),
        ("forbidden", "GET /signin/oidc/callback"),
    ]
    assert "no role" in refusals[0][2] and "s3cret" not in str(refusals)


def audited(running: RunningConsole) -> list[dict]:
    """The console's audit lines so far."""
    log = running.app.state.console.audit.path
    return [json.loads(line) for line in log.read_text().splitlines()]


async def test_an_unverified_email_names_nobody_the_users_file_lists(company) -> None:
    """Some providers let anyone register any address: only a verified one names carol."""
    running, who = company
    who["verified"] = False
    async with httpx.AsyncClient(base_url=running.url(), timeout=30) as http:
        refused = await sign_in(http)
        assert refused.status_code == 403 and "no role" in refused.text
        assert (await http.get("/api/me")).status_code == 401
