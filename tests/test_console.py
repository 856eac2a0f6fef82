"""The console's API against a real dev server and worker: who may do what, and what it does.

Requests go through the real ASGI app (httpx's ASGI transport) to a real Temporal server; the
payments downstream counts what happened. Browsers and SSE over real sockets are in
`test_console_browser.py` and `test_console_events.py`.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from temporalio.client import Client

from tests.agents import PAY_SCRIPT, Payments, build_agent
from tests.conftest import payer_run, running_worker, the_pending_approval, wait_until
from waypoint._console.access import Console
from waypoint._console.app import build_app
from waypoint._console.audit import Audit
from waypoint._console.people import PeopleFileError, hash_password, hash_token, save_entry
from waypoint._console.sessions import Sessions, Throttle
from waypoint.client import runs

PASSWORD = "correct horse battery"


def make_console(client: Client, tmp_path: Path, task_queue: str, **options: object) -> Console:
    users = tmp_path / "users.toml"
    save_entry(users, "users", "ann", hash_password(PASSWORD), {"payer": "approver"})
    save_entry(users, "users", "vic", hash_password(PASSWORD), {"*": "viewer"})
    save_entry(users, "users", "ops", hash_password(PASSWORD), {"*": "operator"})
    save_entry(users, "tokens", "app", hash_token("wpt_app-token"), {"payer": "approver"})
    lower = {"*": "approver", "payer": "viewer"}  # every agent but payer
    save_entry(users, "tokens", "mix", hash_token("wpt_mix-token"), lower)
    save_entry(users, "tokens", "ops-app", hash_token("wpt_ops-token"), {"*": "operator"})
    save_entry(users, "tokens", "lend", hash_token("wpt_lend-token"), {"lender": "operator"})
    return Console(
        client=client,
        people_file=users,
        sessions=Sessions("test-secret"),
        task_queue=task_queue,
        **options,  # type: ignore[arg-type]
    )


@pytest.fixture
async def console_app(
    client: Client, tmp_path: Path, task_queue: str
) -> AsyncIterator[tuple[httpx.AsyncClient, Console]]:
    console = make_console(client, tmp_path, task_queue)
    transport = httpx.ASGITransport(app=build_app(console))
    async with httpx.AsyncClient(transport=transport, base_url="http://console") as http:
        yield http, console


async def sign_in(http: httpx.AsyncClient, user: str) -> str:
    """Sign `user` in on `http`; returns the session's CSRF token."""
    page = await http.get("/signin")
    token = page.text.split('name="form_token" value="')[1].split('"')[0]
    done = await http.post(
        "/signin", data={"user": user, "password": PASSWORD, "form_token": token, "next": "/"}
    )
    assert done.status_code == 303 and done.headers["location"] == "/", done.text
    inbox = await http.get("/")
    return inbox.text.split('name="csrf" value="')[1].split('"')[0]


async def test_unauthenticated_requests_get_401_problems(console_app) -> None:
    http, _ = console_app
    for path in ("/api/runs", "/api/me", "/api/runs/x"):
        answer = await http.get(path)
        assert answer.status_code == 401
        assert answer.headers["content-type"] == "application/problem+json"
        assert answer.json()["status"] == 401 and "sign in" in answer.json()["detail"]
    assert (await http.post("/api/runs/x/approve", json={})).status_code == 401
    bad = await http.get("/api/me", headers={"Authorization": "Bearer nope"})
    assert bad.status_code == 401 and bad.headers["www-authenticate"] == "Bearer"
    page = await http.get("/runs")
    assert page.status_code == 303 and page.headers["location"] == "/signin?next=/runs"


async def test_approver_approves_through_the_api_signed_by_the_console(
    client: Client, tmp_path: Path, task_queue: str
) -> None:
    from waypoint._security import signing

    private, public = signing.new_key()
    console = make_console(
        client, tmp_path, task_queue, signing_key=signing.load_private_key(private)
    )
    payments = Payments(tmp_path / "payments.db")
    agent = build_agent(payments, PAY_SCRIPT, approval=True)
    agent.signed_decisions = True
    keys = signing.load_public_keys(f"console:{public}")
    transport = httpx.ASGITransport(app=build_app(console))
    async with (
        httpx.AsyncClient(transport=transport, base_url="http://console") as http,
        running_worker(client, [agent], task_queue, decision_keys=keys),
    ):
        handle = await runs.start_run(client, "payer", "pay ada 5", task_queue=task_queue)
        pending = await the_pending_approval(client, handle.id)
        token = {"Authorization": "Bearer wpt_app-token"}
        shown = (await http.get(f"/api/runs/{handle.id}", headers=token)).json()
        (waiting,) = shown["pending_approvals"]
        assert waiting["arguments"] == {"payee": "ada", "amount": 5}
        assert waiting["arguments_hash"] == pending.arguments_hash
        stale = {"step_id": pending.step_id, "arguments_hash": "0" * 64}
        refused = await http.post(f"/api/runs/{handle.id}/approve", json=stale, headers=token)
        assert refused.status_code == 409 and "other arguments" in refused.json()["detail"]
        assert payments.count() == 0
        body = {"step_id": pending.step_id, "arguments_hash": pending.arguments_hash}
        done = await http.post(f"/api/runs/{handle.id}/approve", json=body, headers=token)
        assert done.status_code == 200, done.text
        assert done.json()["recorded"] and "app via console" in done.json()["decided_by"]
        result = await handle.result()
    assert result.output == "Paid ada 5." and payments.count() == 1
    (step,) = [r for r in result.ledger if r.step_id == pending.step_id]
    assert step.decided_by and step.decided_by.startswith("app via console (signed")


async def test_roles_csrf_and_forged_posts(
    client: Client, tmp_path: Path, task_queue: str, console_app
) -> None:
    http, _ = console_app
    payments = Payments(tmp_path / "payments.db")
    async with payer_run(client, task_queue, payments) as handle:
        pending = await the_pending_approval(client, handle.id)
        body = {"step_id": pending.step_id, "arguments_hash": pending.arguments_hash}
        csrf = await sign_in(http, "vic")
        page = await http.get(f"/runs/{handle.id}")
        assert page.status_code == 200 and "ada" in page.text
        assert ">Approve</button>" not in page.text  # a viewer sees no approve button
        forged = await http.post(
            f"/api/runs/{handle.id}/approve", json=body, headers={"X-CSRF-Token": csrf}
        )
        assert forged.status_code == 403 and "vic is viewer" in forged.json()["detail"]
        form = {**body, "csrf": csrf}
        assert (await http.post(f"/runs/{handle.id}/approve", data=form)).status_code == 403
        http.cookies.clear()
        csrf = await sign_in(http, "ann")
        no_csrf = await http.post(f"/api/runs/{handle.id}/approve", json=body)
        assert no_csrf.status_code == 403 and "out of date" in no_csrf.json()["detail"]
        assert payments.count() == 0
        done = await http.post(f"/runs/{handle.id}/approve", data={**body, "csrf": csrf})
        assert done.status_code == 303, done.text
        result = await handle.result()
    assert payments.count() == 1 and result.output == "Paid ada 5."


async def test_lists_come_from_visibility_and_respect_roles(
    client: Client, tmp_path: Path, task_queue: str, console_app
) -> None:
    http, _ = console_app
    async with payer_run(client, task_queue, Payments(tmp_path / "payments.db")) as handle:
        await the_pending_approval(client, handle.id)
        token = {"Authorization": "Bearer wpt_app-token"}

        async def listed() -> bool:
            rows = (await http.get("/api/runs?waiting=me&limit=1000", headers=token)).json()["runs"]
            return any(r["run"] == handle.id and r["pending_approvals"] for r in rows)

        await wait_until(listed, "the inbox lists the run")
        page = (await http.get("/api/runs?waiting=me&limit=1000", headers=token)).json()
        (row,) = [r for r in page["runs"] if r["run"] == handle.id]
        asked = row["pending_approvals"][0]["requested_at"]
        assert row["waiting_since"][:19] == asked[:19]  # published to the whole second
        bad = await http.get("/api/runs?state=nonsense", headers=token)
        assert bad.status_code == 422 and "not one of" in bad.json()["detail"]
        injected = await http.get("/api/runs?agent=x'%20OR%20'1'='1", headers=token)
        assert injected.status_code == 422
        other = (await http.get("/api/runs?agent=someone-else", headers=token)).json()
        assert other["runs"] == [] and other["total"] == 0
        mix = {"Authorization": "Bearer wpt_mix-token"}
        waiting = (await http.get("/api/runs?waiting=me&limit=1000", headers=mix)).json()["runs"]
        assert all(r["agent"] != "payer" for r in waiting)
        seen = (await http.get("/api/runs?limit=1000", headers=mix)).json()["runs"]
        assert any(r["run"] == handle.id for r in seen)  # a viewer of payer still sees it
        await handle.terminate("test done")


async def test_sign_in_is_throttled(console_app) -> None:
    http, _ = console_app
    page = await http.get("/signin")
    token = page.text.split('name="form_token" value="')[1].split('"')[0]
    wrong = {"user": "ann", "password": "wrong password", "form_token": token}
    for _ in range(5):
        assert (await http.post("/signin", data=wrong)).headers["location"].startswith("/signin")
    throttled = await http.post("/signin", data={**wrong, "password": PASSWORD})
    assert throttled.status_code == 429 and int(throttled.headers["retry-after"]) > 0
    forged = await http.post("/signin", data={**wrong, "form_token": "forged"})
    assert forged.status_code == 403 and forged.headers["content-type"].startswith("text/html")
    asked = {"Accept": "application/problem+json"}  # a page's refusal as a problem on request
    problem = await http.post("/signin", data={**wrong, "form_token": "forged"}, headers=asked)
    assert problem.status_code == 403 and problem.json()["status"] == 403
    http.cookies.clear()  # a browser that never loaded the form: a forged token is no match
    cookieless = await http.post("/signin", data={**wrong, "form_token": "forged"})
    assert cookieless.status_code == 403


async def test_a_burst_of_100_concurrent_guesses_checks_at_most_the_allowed_five(
    console_app,
) -> None:
    """The attempt is counted before the password hash runs, so a burst cannot outrun it."""
    http, console = console_app
    page = await http.get("/signin")
    token = page.text.split('name="form_token" value="')[1].split('"')[0]

    async def guess(i: int) -> httpx.Response:
        password = PASSWORD if i == 50 else f"guess {i}"
        form = {"user": "ann", "password": password, "form_token": token}
        return await http.post("/signin", data=form)

    answers = await asyncio.gather(*(guess(i) for i in range(100)))
    checked = [a for a in answers if a.status_code == 303]
    refused = [a for a in answers if a.status_code == 429]
    assert len(checked) + len(refused) == 100, {a.status_code for a in answers}
    assert len(checked) <= console.throttle.tries, len(checked)
    assert all(a.headers["location"].startswith("/signin?failed") for a in checked)
    assert all(int(a.headers["retry-after"]) > 0 for a in refused)
    assert "waypoint_session" not in http.cookies


async def test_the_console_serves_the_codec_under_codec(
    client: Client, tmp_path: Path, task_queue: str
) -> None:
    from google.protobuf import json_format
    from temporalio.api.common.v1 import Payloads

    from tests.test_codec import KEY_A, TOKEN, payloads_of, plain
    from waypoint._operations.codec_server import codec_asgi_app
    from waypoint._security.codec import EncryptionCodec

    codec = EncryptionCodec({"a": KEY_A}, "a")
    console = make_console(client, tmp_path, task_queue)
    app = build_app(console, codec=codec_asgi_app(codec, TOKEN))
    encrypted = await codec.encode([plain("a secret")])
    body = json_format.MessageToJson(Payloads(payloads=encrypted))
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://console"
    ) as http:
        refused = await http.post("/codec/decode", content=body)
        assert refused.status_code == 401
        decoded = await http.post(
            "/codec/decode", content=body, headers={"Authorization": f"Bearer {TOKEN}"}
        )
        assert decoded.status_code == 200, decoded.text
        assert payloads_of(decoded.content) == await codec.decode(encrypted)
        assert (await http.get("/api/me")).status_code == 401  # the console's own rules hold


async def test_the_codec_keeps_the_guard_and_behind_tls_cookies_are_host_only_with_hsts(
    client: Client, tmp_path: Path, task_queue: str
) -> None:
    """`/codec` answers with the console's headers and a cap sized for one payload field at
    Temporal's 2 MiB limit; `WAYPOINT_CONSOLE_SECURE=1` adds HSTS and `__Host-` cookies."""
    from google.protobuf import json_format
    from temporalio.api.common.v1 import Payloads

    from tests.test_codec import KEY_A, TOKEN, payloads_of, plain
    from waypoint._console.app import CODEC_MAX_BODY, MAX_BODY
    from waypoint._operations.codec_server import codec_asgi_app
    from waypoint._security.codec import EncryptionCodec

    codec = EncryptionCodec({"a": KEY_A}, "a")
    console = make_console(client, tmp_path, task_queue, secure_cookies=True)
    app = build_app(console, codec=codec_asgi_app(codec, TOKEN))
    encrypted = await codec.encode([plain("x" * (2 * 1024 * 1024 - 1024))])
    body = json_format.MessageToJson(Payloads(payloads=encrypted), indent=None)
    assert MAX_BODY < len(body) < CODEC_MAX_BODY
    auth = {"Authorization": f"Bearer {TOKEN}"}
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="https://console"
    ) as http:
        decoded = await http.post("/codec/decode", content=body, headers=auth)
        assert decoded.status_code == 200, decoded.text
        assert payloads_of(decoded.content) == await codec.decode(encrypted)
        for name in ("x-frame-options", "content-security-policy", "cache-control"):
            assert name in decoded.headers, name
        assert decoded.headers["strict-transport-security"].startswith("max-age=")
        over = await http.post("/codec/decode", content=b"x" * (CODEC_MAX_BODY + 1), headers=auth)
        assert over.status_code == 413 and "strict-transport-security" in over.headers
        page = await http.get("/signin")
        (made,) = page.headers.get_list("set-cookie")
        assert made.startswith("__Host-waypoint_signin=") and "secure" in made.lower()
        assert "path=/" in made.lower() and "domain" not in made.lower()
        await sign_in(http, "vic")
        assert set(http.cookies) == {"__Host-waypoint_session"}
        assert (await http.get("/api/me")).json()["name"] == "vic"
        assert "strict-transport-security" in (await http.get("/api/me")).headers


async def test_an_expired_or_forged_session_is_signed_out(console_app) -> None:
    http, console = console_app
    await sign_in(http, "vic")
    assert (await http.get("/api/me")).status_code == 200
    console.sessions.max_age = -1  # every session is older than that now
    assert (await http.get("/api/me")).status_code == 401
    console.sessions.max_age = 3600
    cookie = http.cookies["waypoint_session"]
    http.cookies.set("waypoint_session", cookie[:-2] + ("AA" if cookie[-2:] != "AA" else "BB"))
    assert (await http.get("/api/me")).status_code == 401


def test_a_console_vouches_for_a_person_only_under_its_own_name() -> None:
    from waypoint._security import signing
    from waypoint.protocol import ApprovalDecision
    from waypoint.protocol.signatures import DecisionCheck, fields

    console_key, console_public = signing.new_key()
    _, other_public = signing.new_key()
    keys = signing.load_public_keys(f"console:{console_public},bob:{other_public}")
    decision = ApprovalDecision(step_id="t1", reviewer="alice via console", arguments_hash="h")
    signed = signing.sign(
        signing.load_private_key(console_key), "run", "chain", "approve", decision
    )

    def check(payload: ApprovalDecision) -> str:
        assert payload.signature is not None
        made = DecisionCheck(
            kind="approve", fields=fields(payload), signature=payload.signature, chain="chain"
        )
        return signing.verify(keys, "run", made).reason

    assert check(signed) == ""
    as_bob = signed.model_copy(update={"reviewer": "alice via bob"})
    assert "does not verify with the public key of reviewer 'alice via bob'" in check(as_bob)
    plain_alice = signed.model_copy(update={"reviewer": "alice"})
    assert "no public key for reviewer 'alice'" in check(plain_alice)


async def test_review_mends_sessions_sign_in_and_the_users_file(console_app, tmp_path) -> None:
    """A changed password and a sign-out end sessions; a cross-site or unbound sign-in form is
    refused; a proxy's Basic header leaves the cookie to speak; a bad edit refuses everyone."""
    http, console = console_app
    await sign_in(http, "vic")
    copied = http.cookies["waypoint_session"]
    basic = {"Authorization": "Basic dXNlcjpwYXNz"}
    assert (await http.get("/api/me", headers=basic)).status_code == 200
    save_entry(
        console.people_file, "users", "vic", hash_password("a new password"), {"*": "viewer"}
    )
    assert (await http.get("/api/me")).status_code == 401  # the old password's session is over
    http.cookies.clear()
    csrf = await sign_in_as(http, "ops")
    copied = http.cookies["waypoint_session"]
    assert (await http.post("/signout", data={"csrf": csrf})).status_code == 303
    http.cookies.set("waypoint_session", copied)
    assert (await http.get("/api/me")).status_code == 401  # a copy of a signed-out session
    http.cookies.clear()
    page = await http.get("/signin")
    token = page.text.split('name="form_token" value="')[1].split('"')[0]
    form = {"user": "ops", "password": PASSWORD, "form_token": token}
    cross = await http.post("/signin", data=form, headers={"Sec-Fetch-Site": "cross-site"})
    assert cross.status_code == 403
    http.cookies.clear()  # the token is bound to the browser that loaded the form
    assert (await http.post("/signin", data=form)).status_code == 403
    console.people_file.write_text('[users.ops]\npassword = "x"\nroles = { "*" = "aprover" }\n')
    broken = await http.get("/api/me", headers={"Authorization": "Bearer wpt_app-token"})
    assert broken.status_code == 503 and "does not read" in broken.json()["detail"]


async def sign_in_as(http: httpx.AsyncClient, user: str) -> str:
    return await sign_in(http, user)


async def test_a_workflow_that_is_not_a_waypoint_run_is_no_run(
    client: Client, console_app, task_queue: str
) -> None:
    http, _ = console_app
    await client.start_workflow("SomeoneElsesWorkflow", id=f"foreign-{task_queue}", task_queue="x")
    everyone = {"Authorization": "Bearer wpt_mix-token"}  # '*' approver
    for path in ("", "/events"):
        shown = await http.get(f"/api/runs/foreign-{task_queue}{path}", headers=everyone)
        assert shown.status_code == 404, shown.text
    for odd in ("\u00b2".encode("latin-1"), b"9" * 5000):
        headers = {**everyone, "Last-Event-ID": odd}  # the review's 500s: both refused now
        answer = await http.get(f"/api/runs/foreign-{task_queue}/events", headers=headers)
        assert answer.status_code == 404
    handle = client.get_workflow_handle(f"foreign-{task_queue}")
    await handle.terminate("test done")
    assert (await http.get("/runs/x?said=Your+session+expired")).status_code == 303  # signed out


async def test_a_cancel_names_who_and_why_and_a_resume_only_raises(
    client: Client, tmp_path: Path, task_queue: str, console_app
) -> None:
    http, _ = console_app
    ops = {"Authorization": "Bearer wpt_ops-token"}
    payments = Payments(tmp_path / "payments.db")
    async with payer_run(client, task_queue, payments) as handle:
        await the_pending_approval(client, handle.id)
        lower = await http.post(f"/api/runs/{handle.id}/resume", json={"max_turns": 1}, headers=ops)
        assert lower.status_code == 409 and "would not raise" in lower.json()["detail"]
        done = await http.post(
            f"/api/runs/{handle.id}/cancel", json={"reason": "fraud"}, headers=ops
        )
        assert done.status_code == 200, done.text
        events = [e async for e in handle.fetch_history_events()]
        asked = [e.workflow_execution_cancel_requested_event_attributes for e in events
                 if e.HasField("workflow_execution_cancel_requested_event_attributes")]  # fmt: skip
        assert asked and asked[0].cause == "cancelled by ops-app via console: fraud"
    assert payments.count() == 0


async def test_a_start_under_the_id_of_a_run_the_caller_cannot_see_discloses_nothing(
    client: Client, tmp_path: Path, task_queue: str, console_app
) -> None:
    http, _ = console_app
    payments = Payments(tmp_path / "payments.db")
    agents = [build_agent(payments, PAY_SCRIPT, approval=True, name=n) for n in ("payer", "lender")]
    async with running_worker(client, agents, task_queue):
        handle = await runs.start_run(
            client, "payer", "pay ada 5", task_queue=task_queue, workflow_id=f"inv-{task_queue}"
        )
        await the_pending_approval(client, handle.id)
        run_id = (await handle.describe()).run_id
        body = {"agent": "lender", "task": "lend ada 5", "workflow_id": handle.id}
        lend = {"Authorization": "Bearer wpt_lend-token"}  # operator of lender only
        unseen = await http.get(f"/api/runs/{handle.id}", headers=lend)
        missing = await http.get(f"/api/runs/none-{task_queue}", headers=lend)
        assert (unseen.status_code, missing.status_code) == (404, 404)
        said = unseen.json()["detail"]  # why, yet the same words as for no run at all
        assert "roles are per agent" in said, said
        assert said.replace(handle.id, "X") == missing.json()["detail"].replace(
            f"none-{task_queue}", "X"
        )
        hidden = await http.post("/api/runs", json=body, headers=lend)
        assert hidden.status_code == 409, hidden.text
        detail = hidden.json()["detail"]
        assert "running" not in detail and run_id not in detail and "payer" not in detail
        unused = {**body, "workflow_id": f"free-{task_queue}"}
        free = await http.post("/api/runs", json=unused, headers=lend)
        assert free.status_code == 201, free.text  # a free id starts
        ops = {"Authorization": "Bearer wpt_ops-token"}  # sees payer: is told what holds it
        seen = await http.post("/api/runs", json=body, headers=ops)
        assert seen.status_code == 409 and "already running" in seen.json()["detail"]
        await handle.terminate("test done")
        await runs.handle(client, f"free-{task_queue}").terminate("test done")


async def test_a_users_file_is_checked_whole_and_read_again_when_its_content_changes(
    console_app, caplog: pytest.LogCaptureFixture
) -> None:
    """A list for a role refuses everyone (503, the log names the line) until it is mended; a
    demotion applies though the mtime stayed; a name like a provider's e-mail is refused."""
    http, console = console_app
    token = {"Authorization": "Bearer wpt_app-token"}
    assert (await http.get("/api/me", headers=token)).json()["roles"] == {"payer": "approver"}
    users = console.people_file
    kept = users.stat()
    good = users.read_text()
    lines = good.splitlines()
    (at,) = [i for i, line in enumerate(lines) if line == '[tokens."app"]']
    lines[at + 2] = 'roles = { "payer" = ["viewer"] }'
    users.write_text("\n".join(lines))
    os.utime(users, ns=(kept.st_atime_ns, kept.st_mtime_ns))
    for _ in range(2):  # the review's first request got a 500, every later one the old role
        broken = await http.get("/api/me", headers=token)
        assert broken.status_code == 503, broken.text
        assert broken.headers["content-type"] == "application/problem+json"
    (logged,) = [r.getMessage() for r in caplog.records if "users file" in r.getMessage()]
    assert f"{users}:{at + 3}: tokens.app.roles.payer" in logged and "hash" not in logged
    lines[at + 2] = 'roles = { "payer" = "viewer" }'
    users.write_text("\n".join(lines))
    os.utime(users, ns=(kept.st_atime_ns, kept.st_mtime_ns))
    assert (await http.get("/api/me", headers=token)).json()["roles"] == {"payer": "viewer"}
    users.write_text(good.replace('[users."vic"]', '[users."carol@example.com"]'))
    assert (await http.get("/api/me", headers=token)).status_code == 503
    with pytest.raises(PeopleFileError, match="no @ or :"):
        save_entry(users, "users", "carol@example.com", hash_password(PASSWORD), {"*": "viewer"})


async def test_a_sign_out_holds_on_a_replica_and_after_a_restart_and_idle_sessions_end(
    client: Client, tmp_path: Path, task_queue: str
) -> None:
    """Sessions live in a SQLite file every replica reads, not in one process's memory."""
    store = tmp_path / "sessions.db"

    def replica() -> tuple[httpx.AsyncClient, Console]:
        console = make_console(client, tmp_path, task_queue)
        console.sessions = Sessions("test-secret", store=store)
        console.throttle = Throttle(store=store)
        transport = httpx.ASGITransport(app=build_app(console))
        return httpx.AsyncClient(transport=transport, base_url="http://console"), console

    (first, _), (second, _) = replica(), replica()
    async with first, second:
        csrf = await sign_in(first, "vic")
        copied = first.cookies["waypoint_session"]
        second.cookies.set("waypoint_session", copied)
        assert (await second.get("/api/me")).json()["name"] == "vic"  # one session, two replicas
        assert (await first.post("/signout", data={"csrf": csrf})).status_code == 303
        assert (await second.get("/api/me")).status_code == 401  # signed out there too
    restarted, console = replica()
    async with restarted:
        restarted.cookies.set("waypoint_session", copied)
        assert (await restarted.get("/api/me")).status_code == 401
        await sign_in(restarted, "vic")
        assert (await restarted.get("/api/me")).status_code == 200
        console.sessions.idle = 0.0  # every session has been idle longer than that now
        assert (await restarted.get("/api/me")).status_code == 401
        console.sessions.idle = 3600.0
        assert (await restarted.get("/api/me")).status_code == 401  # ended, not paused
    (first, _), (second, _) = replica(), replica()
    async with first, second:  # the throttle counts across replicas too: 5 in all, not 5 each
        answers = []
        for i in range(8):
            http = (first, second)[i % 2]
            page = await http.get("/signin")
            token = page.text.split('name="form_token" value="')[1].split('"')[0]
            form = {"user": "ann", "password": f"guess {i}", "form_token": token}
            answers.append((await http.post("/signin", data=form)).status_code)
        assert answers == [303] * 5 + [429] * 3, answers


async def test_the_audit_log_says_who_did_what_from_where_to_which_run_and_no_secret(
    client: Client, tmp_path: Path, task_queue: str
) -> None:
    log = tmp_path / "audit.jsonl"
    console = make_console(client, tmp_path, task_queue, audit=Audit(path=log))
    payments = Payments(tmp_path / "payments.db")
    agent = build_agent(payments, PAY_SCRIPT, approval=True)
    ops = {"Authorization": "Bearer wpt_ops-token"}
    transport = httpx.ASGITransport(app=build_app(console))
    async with (
        httpx.AsyncClient(transport=transport, base_url="http://console") as http,
        running_worker(client, [agent], task_queue),
    ):
        started = await http.post(
            "/api/runs", json={"agent": "payer", "task": "pay ada 5"}, headers=ops
        )
        run = started.json()["run"]
        pending = await the_pending_approval(client, run)
        body = {"step_id": pending.step_id, "arguments_hash": pending.arguments_hash}
        csrf = await sign_in(http, "vic")
        forged = await http.post(
            f"/api/runs/{run}/approve", json=body, headers={"X-CSRF-Token": csrf}
        )
        assert forged.status_code == 403
        http.cookies.clear()
        page = await http.get("/signin")
        token = page.text.split('name="form_token" value="')[1].split('"')[0]
        wrong = {"user": "ann", "password": "hunter2 wrong", "form_token": token}
        assert (await http.post("/signin", data=wrong)).status_code == 303
        csrf = await sign_in(http, "ann")
        steered = await http.post(
            f"/runs/{run}/steer", data={"message": "pay quickly", "csrf": csrf}
        )
        assert steered.status_code == 303
        done = await http.post(f"/runs/{run}/approve", data={**body, "csrf": csrf})
        assert done.status_code == 303
        await runs.handle(client, run).result()
        late = await http.post(f"/api/runs/{run}/cancel", json={"reason": "x"}, headers=ops)
        assert late.status_code == 409
        resumed = await http.post(f"/api/runs/{run}/resume", json={"max_turns": 9}, headers=ops)
        assert resumed.status_code == 409
        fix = {"step_id": "t1", "action": "retry", "reason": "checked"}
        assert (
            await http.post(f"/api/runs/{run}/resolve", json=fix, headers=ops)
        ).status_code == 409
        assert (await http.post("/signout", data={"csrf": csrf})).status_code == 303
        session_cookie = csrf  # the last values a secret could leak from
    text = log.read_text()
    lines = [json.loads(line) for line in text.splitlines()]
    seen = [(line["event"], line["who"], line.get("outcome")) for line in lines]
    assert seen == [
        ("start", "ops-app", "done"),
        ("signin", "vic", None),
        ("forbidden", "vic", None),
        ("signin.failed", "ann", None),
        ("signin", "ann", None),
        ("steer", "ann", "done"),
        ("approve", "ann", "done"),
        ("cancel", "ops-app", "refused"),
        ("resume", "ops-app", "refused"),
        ("resolve", "ops-app", "refused"),
        ("signout", "ann", None),
    ], seen
    assert all(line["from"] == "127.0.0.1" and line["time"] for line in lines)
    assert all(
        line["run"] == run
        for line in lines
        if line["event"] not in ("signin", "signin.failed", "signout", "forbidden")
    )
    assert lines[2]["status"] == 403 and f"/api/runs/{run}/approve" in lines[2]["path"]
    assert lines[3]["why"] == "password" and lines[6]["step_id"] == pending.step_id
    for secret in (PASSWORD, "hunter2", "wpt_ops-token", session_cookie, "pay quickly", token):
        assert secret not in text, secret
