"""The console's API against its own OpenAPI document, fuzzed by schemathesis, and its body rules.

Schemathesis reads `/api/openapi.json` from the real app and sends what it generates, valid
and not (bad bodies, query strings, path parameters), in-process through its ASGI transport,
as an operator of every agent, to a real dev server with a real run waiting for approval. No
answer is a 5xx, every 4xx is a problem document, every answer fits the schema. Hypothesis
runs derandomized, a few examples an operation, so the file stays well under a minute.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.config import SchemathesisConfig
from temporalio.client import Client

from tests.agents import Payments
from tests.conftest import payer_run, the_pending_approval
from waypoint._console.access import Console
from waypoint._console.app import MAX_BODY, build_app
from waypoint._console.people import hash_password, hash_token, save_entry
from waypoint._console.sessions import COOKIE, Sessions, generation

TOKEN = "wpt_ops-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
PROBLEM = "application/problem+json"
EXAMPLES = 20
"""Examples per operation and generation mode: about 450 requests, 10 s on 2 cores."""
CONFIG = """
max-stream-events = 3

[generation]
deterministic = true

[checks.negative_data_rejection]
expected-statuses = [400, 401, 403, 404, 405, 406, 409, 413, 415, 422, 428, 429]
"""
"""An event stream is read to its third event (a live run's never ends); a body too large for
the console is refused with 413 before it is read, as its schema cannot say."""


def ops_console(client: Client, tmp_path: Path, task_queue: str) -> Console:
    """A console whose one API token is an operator of every agent."""
    users = tmp_path / "users.toml"
    save_entry(users, "tokens", "ops", hash_token(TOKEN), {"*": "operator"})
    return Console(
        client=client, people_file=users, sessions=Sessions("secret"), task_queue=task_queue
    )


@pytest.fixture
async def waiting(client: Client, tmp_path: Path, task_queue: str) -> AsyncIterator[Any]:
    """A worker up, and a run of `payer` waiting for approval of its payment."""
    payments = Payments(tmp_path / "payments.db")
    async with payer_run(client, task_queue, payments) as handle:
        pending = await the_pending_approval(client, handle.id)
        yield handle, pending, payments


def assert_problem(response: Any) -> None:
    """A 4xx is an RFC 9457 problem document: its type, a status that matches, title, detail."""
    kind = response.headers.get("content-type", "")
    kind = kind[0] if isinstance(kind, list) else kind  # schemathesis keeps a list per header
    assert kind.startswith(PROBLEM), f"{response.status_code} as {kind!r}: {response.text[:300]}"
    body = response.json()
    assert body["status"] == response.status_code, body
    assert body["title"] and body["detail"], body


Seen = dict[tuple[str, str], dict[int, int]]
"""How many answers of each status, by operation and generation mode."""


def fuzz(schema: Any, run: str, step_id: str) -> Seen:
    """Every operation, valid and invalid cases, each answer checked; what they answered."""
    seen: Seen = {}
    for result in schema.get_all_operations():
        operation = result.ok()
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            strategy = operation.as_strategy(generation_mode=mode)
            if mode is GenerationMode.POSITIVE and "{run}" in operation.path:
                strategy = st.one_of(strategy, strategy.map(lambda c: at_run(c, run, step_id)))
            if mode is GenerationMode.POSITIVE and operation.label == "POST /api/runs":
                strategy = strategy.map(hosted)
            if mode is GenerationMode.POSITIVE and operation.label == "GET /api/runs":
                strategy = strategy.map(first_page)
            statuses = seen.setdefault((operation.label, mode.value), {})
            try:
                check_each(strategy, statuses)
            except Unsatisfiable:
                assert mode is GenerationMode.NEGATIVE, operation.label  # nothing to break
    return seen


def at_run(case: Any, run: str, step_id: str) -> Any:
    """The case aimed at the real run (and, for a decision, at the step it waits on)."""
    case.path_parameters = {**(case.path_parameters or {}), "run": run}
    if isinstance(case.body, dict) and "step_id" in case.body:
        case.body = {**case.body, "step_id": step_id}
    return case


def hosted(case: Any) -> Any:
    """A start of the agent the worker hosts: one of any other waits 2 s to be refused."""
    case.body = {**case.body, "agent": "payer"}
    return case


def first_page(case: Any) -> Any:
    """A list from its first page: a page token is opaque, so its schema cannot say which are
    real (a made-up one is refused 422, `test_console_lists.py`)."""
    case.query = {**(case.query or {}), "page": ""}
    return case


def check_each(strategy: Any, statuses: dict[int, int]) -> None:
    """Send each case the strategy draws; no 5xx, 4xx as problems, all as the schema says."""

    @settings(
        max_examples=EXAMPLES,
        derandomize=True,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )
    @given(case=strategy)
    def check(case: Any) -> None:
        response = case.call(headers=AUTH, timeout=10)
        statuses[response.status_code] = statuses.get(response.status_code, 0) + 1
        shown = f"{case.as_curl_command()[:500]}\n{response.text[:500]}"
        assert response.status_code < 500, shown
        if 400 <= response.status_code < 500:
            assert_problem(response)
        case.validate_response(response, headers=AUTH)

    check()


async def test_the_api_answers_every_generated_request_as_its_schema_says(
    client: Client, tmp_path: Path, task_queue: str, waiting: Any
) -> None:
    handle, pending, payments = waiting
    app = build_app(ops_console(client, tmp_path, task_queue))
    config = SchemathesisConfig.from_str(CONFIG)

    def run_schemathesis() -> Seen:
        schema = schemathesis.openapi.from_asgi("/api/openapi.json", app, config=config)
        return fuzz(schema, handle.id, pending.step_id)

    # In a thread: the worker goes on on this loop; the app runs on schemathesis's own.
    seen = await asyncio.to_thread(run_schemathesis)
    print("\n".join(f"{op} {mode}: {dict(sorted(s.items()))}" for (op, mode), s in seen.items()))
    operations = {op for op, _ in seen}
    assert len(operations) == 16 and all(seen[op, "positive"] for op in operations), seen
    assert seen["GET /api/runs/{run}", "positive"].get(200), "the real run was never read"
    assert seen["POST /api/runs", "positive"].get(201), "no run was started"
    assert payments.count() == 0  # no generated approval had the arguments' hash


NON_ASCII = st.text(st.characters(codec="latin-1", exclude_categories=("Cc",)), min_size=1).filter(
    lambda value: not value.isascii() and value.strip() == value
)
"""A header value that is not ASCII (a header is latin-1 on the wire): the review's 500."""


async def test_every_change_with_a_non_ascii_csrf_token_is_refused_403_as_a_problem(
    client: Client, tmp_path: Path, task_queue: str, waiting: Any
) -> None:
    """A signed-in browser's cookie, every POST in the schema, a CSRF token that is not ASCII."""
    handle, pending, payments = waiting
    console = ops_console(client, tmp_path, task_queue)
    save_entry(console.people_file, "users", "olga", hash_password("pw"), {"*": "operator"})
    (stored, _) = console.people().users["olga"]
    cookie = console.sessions.cookie("olga", "password", generation(stored))
    app = build_app(console)
    config = SchemathesisConfig.from_str(CONFIG)

    def run_schemathesis() -> dict[str, int]:
        schema = schemathesis.openapi.from_asgi("/api/openapi.json", app, config=config)
        sent: dict[str, int] = {}
        for result in schema.get_all_operations():
            operation = result.ok()
            if operation.method.upper() != "POST":
                continue
            cases = operation.as_strategy(generation_mode=GenerationMode.POSITIVE)
            aimed = cases.map(lambda c: at_run(c, handle.id, pending.step_id))

            @settings(max_examples=8, derandomize=True, deadline=None)
            @given(case=aimed, token=NON_ASCII)
            def check(case: Any, token: str) -> None:
                response = case.call(
                    headers={"X-CSRF-Token": token}, cookies={COOKIE: cookie}, timeout=10
                )
                assert response.status_code == 403, (token, response.text[:300])
                assert_problem(response)
                sent[case.operation.label] = sent.get(case.operation.label, 0) + 1

            check()
        return sent

    sent = await asyncio.to_thread(run_schemathesis)
    assert len(sent) == 10 and all(sent.values()), sent  # every POST route was tried
    assert payments.count() == 0


def text(**more: Any) -> dict[str, Any]:
    return {"type": "string", **more}


def form(*required: str, **fields: dict[str, Any]) -> dict[str, Any]:
    """A POST taking a form with `fields`, plus the headers a browser may send any value of."""
    body = {"type": "object", "properties": fields, "required": list(required)}
    return {
        "post": {
            "parameters": [
                {"name": "X-CSRF-Token", "in": "header", "schema": text()},
                {"name": "Sec-Fetch-Site", "in": "header", "schema": text()},
            ],
            "requestBody": {
                "required": True,
                "content": {"application/x-www-form-urlencoded": {"schema": body}},
            },
            "responses": {"default": {"description": "a page, a redirect or a refusal"}},
        }
    }


RUN = {"name": "run", "in": "path", "required": True, "schema": text(pattern="^[a-z]{1,8}$")}
FORMS: dict[str, Any] = {
    "openapi": "3.0.3",
    "info": {"title": "The console's page forms", "version": "1"},
    "paths": {
        "/signin": form(
            "user", "password", "form_token", user=text(), password=text(), form_token=text(),
            next=text(),
        ),
        "/signout": form("csrf", csrf=text()),
        "/runs/{run}/approve": form(
            "step_id", "arguments_hash", csrf=text(), step_id=text(), arguments_hash=text(),
            reason=text(),
        ),
        "/runs/{run}/reject": form(
            "step_id", "arguments_hash", "reason", csrf=text(), step_id=text(),
            arguments_hash=text(), reason=text(),
        ),
        "/runs/{run}/steer": form("message", csrf=text(), message=text()),
        "/runs/{run}/cancel": form(csrf=text(), reason=text()),
    },
}  # fmt: skip
"""The page forms (not in the API's document): every field and header any text at all."""
for _path, _item in FORMS["paths"].items():
    if "{run}" in _path:
        _item["post"]["parameters"].append(RUN)


async def test_every_page_form_with_any_text_in_its_fields_and_headers_is_a_4xx(
    client: Client, tmp_path: Path, task_queue: str
) -> None:
    """Signed in, a form whose CSRF token is not the session's is 403 (or 422 for fields the
    form does not take), whatever its characters; a sign-in with a forged form token is 403."""
    console = ops_console(client, tmp_path, task_queue)
    save_entry(console.people_file, "users", "olga", hash_password("pw"), {"*": "operator"})
    (stored, _) = console.people().users["olga"]
    cookie = console.sessions.cookie("olga", "password", generation(stored))
    schema = schemathesis.openapi.from_dict(FORMS, config=SchemathesisConfig.from_str(CONFIG))
    schema.app = build_app(console)

    def check_each(strategy: Any, statuses: dict[int, int]) -> None:
        @settings(
            max_examples=8,
            derandomize=True,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        )
        @given(case=strategy)
        def check(case: Any) -> None:
            response = case.call(cookies={COOKIE: cookie}, timeout=10)
            statuses[response.status_code] = statuses.get(response.status_code, 0) + 1
            if not str([case.body, case.headers]).isascii():
                statuses[0] = statuses.get(0, 0) + 1  # a case holding what is not ASCII
            assert response.status_code in (403, 422), (case.body, response.text[:300])

        with contextlib.suppress(Unsatisfiable):
            check()

    def run_schemathesis() -> dict[str, dict[int, int]]:
        seen: dict[str, dict[int, int]] = {}
        for result in schema.get_all_operations():
            operation = result.ok()
            for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
                statuses = seen.setdefault(f"{operation.label} {mode.value}", {})
                check_each(operation.as_strategy(generation_mode=mode), statuses)
        return seen

    seen = await asyncio.to_thread(run_schemathesis)
    print(seen)
    assert all(statuses for statuses in seen.values()), seen
    assert sum(s.get(403, 0) for s in seen.values()) > 40, seen
    assert sum(s.get(0, 0) for s in seen.values()) > 20, seen  # non-ASCII fields and headers


@pytest.fixture
async def http(client: Client, tmp_path: Path, task_queue: str) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=build_app(ops_console(client, tmp_path, task_queue)))
    async with httpx.AsyncClient(
        transport=transport, base_url="http://console", headers=AUTH
    ) as http:
        yield http


async def test_a_body_over_a_mebibyte_is_refused_with_413_declared_or_chunked(
    http: httpx.AsyncClient,
) -> None:
    big = b'{"message": "' + b"x" * MAX_BODY + b'"}'
    declared = await http.post(
        "/api/runs/r/steer", content=big, headers={"content-type": "application/json"}
    )
    assert declared.status_code == 413
    assert_problem(declared)

    async def chunks() -> AsyncIterator[bytes]:
        for start in range(0, len(big), 64 * 1024):
            yield big[start : start + 64 * 1024]

    chunked = await http.post(
        "/api/runs/r/steer", content=chunks(), headers={"content-type": "application/json"}
    )
    assert "content-length" not in chunked.request.headers
    assert chunked.status_code == 413, chunked.text
    assert_problem(chunked)


async def test_a_body_that_is_not_json_gets_a_422_problem(http: httpx.AsyncClient) -> None:
    for kind, body in (
        ("application/json", b"{not json"),
        ("text/plain", b"approve it"),
        ("application/json", b"[1, 2]"),
        ("application/json", b'{"step_id": "\xff\xfe"}'),  # not UTF-8: FastAPI says 400
    ):
        answer = await http.post(
            "/api/runs/r/approve", content=body, headers={"content-type": kind}
        )
        assert answer.status_code == 422, (kind, body, answer.text)
        assert_problem(answer)


async def test_a_method_the_api_lacks_gets_a_405_problem_that_says_what_is_allowed(
    http: httpx.AsyncClient,
) -> None:
    answer = await http.delete("/api/runs/r")
    assert answer.status_code == 405 and answer.headers["allow"] == "GET"
    assert_problem(answer)


async def test_a_start_of_an_agent_no_worker_hosts_is_a_422_problem_naming_it(
    http: httpx.AsyncClient, waiting: Any
) -> None:
    answer = await http.post("/api/runs", json={"agent": "payr", "task": "pay ada 5"})
    assert answer.status_code == 422
    assert_problem(answer)
    assert "'payr'" in answer.json()["detail"] and "payer" in answer.json()["detail"]


async def test_an_approval_sent_twice_pays_once_and_the_second_is_refused_409(
    http: httpx.AsyncClient, waiting: Any
) -> None:
    handle, pending, payments = waiting
    body = {"step_id": pending.step_id, "arguments_hash": pending.arguments_hash}
    first = await http.post(f"/api/runs/{handle.id}/approve", json=body)
    assert first.status_code == 200 and first.json()["recorded"], first.text
    again = await http.post(f"/api/runs/{handle.id}/approve", json=body)
    assert again.status_code == 409, again.text
    assert_problem(again)
    refused = again.json()["detail"]
    assert pending.step_id in refused and ("not awaiting" in refused or "already" in refused)
    result = await handle.result()
    assert result.output == "Paid ada 5." and payments.count() == 1
    (step,) = [r for r in result.ledger if r.step_id == pending.step_id]
    assert step.decided_by.startswith("ops via console")
    late = await http.post(f"/api/runs/{handle.id}/approve", json=body)
    assert late.status_code == 409 and "nothing to approve" in late.json()["detail"]
    assert payments.count() == 1


async def test_two_approvals_at_once_pay_once_and_one_is_refused_409(
    http: httpx.AsyncClient, waiting: Any
) -> None:
    handle, pending, payments = waiting
    body = {"step_id": pending.step_id, "arguments_hash": pending.arguments_hash}
    url = f"/api/runs/{handle.id}/approve"
    answers = await asyncio.gather(http.post(url, json=body), http.post(url, json=body))
    assert sorted(a.status_code for a in answers) == [200, 409], [a.text for a in answers]
    (refused,) = [a for a in answers if a.status_code == 409]
    assert_problem(refused)
    assert pending.step_id in refused.json()["detail"]
    result = await handle.result()
    assert result.output == "Paid ada 5." and payments.count() == 1
