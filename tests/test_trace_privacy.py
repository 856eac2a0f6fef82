"""Spans hold what the history may hold (issue 34.1).

With encryption on, a tool failing with an IBAN in its message put the IBAN into the exported
traces five times: the step span's status, Temporal's `RunActivity` status and its exception
event (`exception.message`, `exception.stacktrace`). Spans are checked here as a collector
receives them, over OTLP/HTTP from the real exporter, and in the trace file, alike.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from pydantic import BaseModel
from temporalio.client import Client

from tests.conftest import running_worker
from waypoint._agent import Agent
from waypoint._operations.processes import free_port
from waypoint._operations.tracing import configured_tracing
from waypoint._tools import tool
from waypoint.client.runs import start_run
from waypoint.testing import reply, text, tool_use

IBAN = "DE89370400440532013000"


class Receiver(ThreadingHTTPServer):
    """A real OTLP/HTTP traces endpoint: what a collector receives, decoded."""

    bodies: list[bytes]


class Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802
        body = self.rfile.read(int(self.headers["Content-Length"]))
        assert isinstance(self.server, Receiver)
        self.server.bodies.append(body)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.end_headers()
        self.wfile.write(b"")

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver(("127.0.0.1", free_port()), Handler)
    server.bodies = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def received_text(receiver: Receiver) -> str:
    """Every span's name, status text and event attributes, as the collector got them."""
    parts: list[str] = []
    for body in receiver.bodies:
        request = ExportTraceServiceRequest.FromString(body)
        for resource in request.resource_spans:
            for scope in resource.scope_spans:
                for span in scope.spans:
                    parts += [span.name, span.status.message]
                    for event in span.events:
                        parts += [str(a.value) for a in event.attributes]
    return "\n".join(parts)


class Account(BaseModel):
    iban: str


@tool("read")
async def check_account(args: Account) -> str:
    """Check an account."""
    raise ValueError(f"the bank refused payee {args.iban}")


@pytest.mark.parametrize("details", [True, False])
async def test_spans_carry_an_errors_type_and_step_never_its_text_unless_trusted(
    client: Client, task_queue: str, tmp_path: Path, receiver: Receiver, details: bool
) -> None:
    trace_file = tmp_path / "spans.jsonl"
    endpoint = f"http://127.0.0.1:{receiver.server_address[1]}/v1/traces"
    tracing = configured_tracing(endpoint, trace_file, details=details)
    assert tracing is not None
    script = [reply(tool_use("check_account", iban=IBAN)), reply(text("It was refused."))]
    agent = Agent(
        name="checker",
        model="claude-sonnet-4-6",
        system="You check accounts.",
        tools=[check_account],
        script=script,
    )
    traced = Client(**{**client.config(), "interceptors": [tracing]})
    async with running_worker(traced, [agent], task_queue):
        handle = await start_run(traced, "checker", "check", task_queue=task_queue)
        await handle.result()
    assert tracing.provider.force_flush()
    collected = received_text(receiver)
    written = trace_file.read_text()
    assert "execute_tool check_account" in collected and "ApplicationError" in collected
    assert "ApplicationError" in written and "t1.tool.1.check_account" in written
    for seen in (collected, written):
        assert (IBAN in seen) is details  # a trusted collector gets it all; others never
