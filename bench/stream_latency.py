"""Stream latency: from a token leaving the Messages API server to a reader of `runs.events`.

    python bench/stream_latency.py [--deltas 400] [--delay 0.02] [--runs 2]

The local Messages API server (tests/fake_messages_api) streams one answer of `--deltas` text
deltas, `--delay` seconds apart (0.02 s is about Claude's pace), to the real `anthropic` client
in a real worker on an embedded dev server. The time each delta is written to the socket is
taken in the server; the time it comes out of `runs.events` (what `waypoint watch` renders) is
taken in the reader, in the same process, so one clock serves both. Prints the median and p95.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from anthropic import AsyncAnthropic  # noqa: E402
from temporalio.client import Client  # noqa: E402
from temporalio.contrib.pydantic import pydantic_data_converter  # noqa: E402

from tests.fake_messages_api import FakeMessagesAPI, render, text  # noqa: E402
from tests.fake_messages_api.handler import _Handler  # noqa: E402
from waypoint._agent import Agent  # noqa: E402
from waypoint._operations.dev_server import free_port, start_dev_server  # noqa: E402
from waypoint._plugin import WorkerOptions  # noqa: E402
from waypoint._providers.claude.provider import AnthropicModel  # noqa: E402
from waypoint._worker import build_worker  # noqa: E402
from waypoint.client import runs  # noqa: E402
from waypoint.protocol.events import TextDelta  # noqa: E402

sent: dict[str, float] = {}


def _timed_send_events(self: Any, events: list[render.Event], delay: float) -> None:
    """The server's own `_send_events`, noting when each text delta is written."""
    self.send_response(200)
    self.send_header("content-type", "text/event-stream")
    self.send_header("transfer-encoding", "chunked")
    self.send_header("connection", "close")
    self.end_headers()
    for name, data in events:
        chunk = f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()
        self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        self.wfile.flush()
        delta = data.get("delta", {}) if isinstance(data, dict) else {}
        if delta.get("type") == "text_delta":
            sent[delta["text"]] = time.time()
        if delay:
            time.sleep(delay)
    self.wfile.write(b"0\r\n\r\n")


def _one_token_a_delta(value: str, parts: int = 3) -> list[str]:
    return [w + " " for w in value.split(" ")] if " " in value else [value]


async def main(deltas: int, delay: float, n_runs: int) -> None:
    _Handler._send_events = _timed_send_events  # type: ignore[method-assign]
    render.split = _one_token_a_delta  # type: ignore[assignment]
    latencies: list[float] = []
    agent = Agent(name="talker", model="claude-sonnet-4-6", system="Talk.", tools=[])
    with tempfile.TemporaryDirectory() as tmp, FakeMessagesAPI() as api:
        server = start_dev_server(Path(tmp) / "state", port=free_port(), ui_port=free_port())
        try:
            client = await Client.connect(server.address, data_converter=pydantic_data_converter)
            claude = AnthropicModel(
                AsyncAnthropic(base_url=api.base_url, api_key="test", max_retries=0)
            )
            worker = build_worker(
                client, [agent], task_queue="latency", options=WorkerOptions(claude=claude)
            )
            async with worker:
                for k in range(n_runs):
                    words = " ".join(f"r{k}w{i}" for i in range(deltas))
                    api.enqueue_message(text(words), event_delay=delay)
                    handle = await runs.start_run(client, "talker", "talk", task_queue="latency")
                    async for event in runs.events(client, handle.id):
                        if isinstance(event, TextDelta) and event.text in sent:
                            latencies.append(time.time() - sent[event.text])
                    await handle.result()
        finally:
            server.stop()
    ms = sorted(1000 * x for x in latencies)
    p95 = ms[int(0.95 * (len(ms) - 1))]
    print(
        f"{len(ms)} deltas ({n_runs} runs x {deltas}, one every {delay * 1000:.0f} ms): "
        f"server -> runs.events median {statistics.median(ms):.0f} ms, p95 {p95:.0f} ms, "
        f"max {ms[-1]:.0f} ms"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--deltas", type=int, default=400)
    parser.add_argument("--delay", type=float, default=0.02)
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args()
    asyncio.run(main(args.deltas, args.delay, args.runs))
