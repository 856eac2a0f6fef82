"""Failure messages and span text hold no credentials and no quoted request bodies (issue 34.6).

A transport's error names the URL it called, user:password and `?api_key=` included, and some
clients quote the body they sent: a tool failing that way put the password, the key and the
IBAN in the body into the activity's failure in history (plain text without keys), the ledger,
the tool result the model read, and every span.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from tests.conftest import running_worker
from tests.test_trace_privacy import Receiver, received_text, receiver  # noqa: F401
from waypoint._agent import Agent
from waypoint._operations.tracing import configured_tracing
from waypoint._security.scrub import scrub
from waypoint._tools import tool
from waypoint.client.runs import start_run
from waypoint.testing import last_tool_results, reply, text, tool_use

IBAN = "DE89370400440532013000"
SECRETS = ("hunter2", "sk-live-123", IBAN)


class Transfer(BaseModel):
    iban: str


@tool("read")
async def lookup_payee(args: Transfer) -> str:
    """Look a payee up at the bank."""
    raise ConnectionError(
        f"POST https://bob:hunter2@bank.example/payees?api_key=sk-live-123&v=2 failed: "
        f'body=b\'{{"iban": "{args.iban}"}}\''
    )


def test_scrub_hides_credentials_secret_parameters_and_quoted_bodies() -> None:
    said = scrub(
        'GET https://u:p@h/x?token=t0k&page=2 and ftp://anon@h/ failed; request body: {"a": 1}'
    )
    assert said == (
        "GET https://***@h/x?token=***&page=2 and ftp://***@h/ failed; "
        "request body: <body withheld>"
    )
    assert scrub("Anthropic API error 400 (invalid_request_error): messages.1") == (
        "Anthropic API error 400 (invalid_request_error): messages.1"
    )


async def test_a_failures_text_is_scrubbed_in_history_the_ledger_the_model_and_spans(
    client: Client,
    task_queue: str,
    tmp_path: Path,
    receiver: Receiver,  # noqa: F811
) -> None:
    endpoint = f"http://127.0.0.1:{receiver.server_address[1]}/v1/traces"
    tracing = configured_tracing(endpoint, tmp_path / "spans.jsonl", details=True)
    assert tracing is not None
    told: list[str] = []

    def turn2(request: object) -> object:
        told.extend(str(r.content) for r in last_tool_results(request))  # type: ignore[arg-type]
        return reply(text("The bank is unreachable."))

    agent = Agent(
        name="payee_checker",
        model="claude-sonnet-4-6",
        system="You look payees up.",
        tools=[lookup_payee],
        script=[reply(tool_use("lookup_payee", iban=IBAN)), turn2],  # type: ignore[list-item]
    )
    traced = Client(**{**client.config(), "interceptors": [tracing]})
    async with running_worker(traced, [agent], task_queue):
        handle = await start_run(traced, "payee_checker", "look up", task_queue=task_queue)
        result = await handle.result()
    assert tracing.provider.force_flush()
    failures = [
        e.activity_task_failed_event_attributes.failure.message
        async for e in handle.fetch_history_events()
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED
    ]
    ledger = " ".join(r.model_dump_json() for r in result.ledger)
    spans = received_text(receiver) + (tmp_path / "spans.jsonl").read_text()
    assert told and "https://***@bank.example/payees?api_key=***&v=2" in told[0]
    for seen in (" ".join(failures), ledger, " ".join(told), spans):
        assert not [s for s in SECRETS if s in seen], seen
    assert failures and "<body withheld>" in failures[0]


def test_a_body_withholds_the_rest_of_the_text_in_one_match() -> None:
    """A greedy `{...}` per match took 1.3 s on 224 KB of repeated `data: {` (quadratic)."""
    assert scrub("data: {x} " * 22_000) == "data: <body withheld>"
