"""What prompt caching saves: one 40-turn run with and without it, billed as the API would.

    python bench/cost.py [--turns 40] [--page-tokens 3000]

Each run goes through a real dev server and an in-process Waypoint worker whose Claude provider
(the real `anthropic` client) talks to the local Messages API server in tests/, in auto-answer
mode: every turn the model reads one more page (about 3,000 tokens of tool output), then
answers. The server counts tokens (ceil(JSON characters / 4), see tests/fake_messages_api/prompt.py)
and bills cache reads and writes by prefix and TTL as the API does, so the figures are what the
client's cache markers would earn, not what a real tokenizer would count.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from anthropic import AsyncAnthropic  # noqa: E402
from pydantic import BaseModel  # noqa: E402

from bench.harness import Env, env, new_id  # noqa: E402
from bench.stats import table  # noqa: E402
from tests.fake_messages_api import FakeMessagesAPI, reply, text, tool_use  # noqa: E402
from waypoint._agent import Agent  # noqa: E402
from waypoint._providers.claude.provider import AnthropicModel  # noqa: E402
from waypoint._providers.pricing import cost_usd  # noqa: E402
from waypoint._tools import tool  # noqa: E402
from waypoint.client import runs  # noqa: E402
from waypoint.protocol import Limits, ModelSettings, Usage  # noqa: E402

MODEL = "claude-sonnet-4-6"
TARGET = 0.25
"""Billed input cost with caching, as a share of the uncached run's: the issue's target."""


class PageArgs(BaseModel):
    page: int


def _page_text(page: int, tokens: int) -> str:
    """About `tokens` tokens of page text (four characters a token, less the JSON framing)."""
    line = f"page {page}: the quick brown fox jumps over the lazy dog. "
    size = tokens * 4 - 100
    return (line * (size // len(line) + 1))[:size]


def reader(name: str, cache: Literal["5m", "1h", "off"], turns: int, page_tokens: int) -> Agent:
    """An agent with one read tool that returns a page of about `page_tokens` tokens."""

    @tool("read", name="read_page")
    async def read_page(args: PageArgs) -> str:
        """Read one page of the report."""
        return _page_text(args.page, page_tokens)

    limits = Limits(max_turns=turns + 5)
    settings = ModelSettings(cache=cache)
    return Agent(name, MODEL, "You read reports.", [read_page], limits, settings=settings)


def auto_answer(turns: int):
    """Read page after page until `turns` pages are read, then answer."""

    def answer(body: dict[str, Any]) -> Any:
        read = sum(
            1
            for message in body["messages"]
            if isinstance(message["content"], list)
            and any(b.get("type") == "tool_result" for b in message["content"])
        )
        if read < turns:
            return [text(f"Reading page {read + 1}."), tool_use("read_page", {"page": read + 1})]
        return reply(text(f"Read {read} pages."))

    return answer


@dataclass
class Bill:
    """What one run was billed, summed over its model calls."""

    label: str
    calls: int
    usage: Usage
    marked_calls: int
    """Calls that carried at least one cache_control marker."""
    recorded_cost: float
    seconds: float

    @property
    def input_cost(self) -> float:
        """USD for the prompt side: plain input, cache writes and cache reads."""
        return cost_usd(MODEL, self.usage.model_copy(update={"output_tokens": 0})) or 0.0

    @property
    def total_cost(self) -> float:
        """USD for the whole run, output included."""
        return cost_usd(MODEL, self.usage) or 0.0


def _marked(body: Any) -> bool:
    return '"cache_control"' in repr(body).replace("'", '"')


async def one_run(bench: Env, cache: Literal["5m", "1h", "off"], turns: int, pages: int) -> Bill:
    """One run of the reader agent against a fresh local Messages API server."""
    name = f"reader-{cache}"
    queue = new_id("cost")
    with FakeMessagesAPI(auto_answer=auto_answer(turns)) as api:
        client = AsyncAnthropic(base_url=api.base_url, api_key="bench", max_retries=0)
        claude = AnthropicModel(client)
        agent = reader(name, cache, turns, pages)
        started = time.perf_counter()
        async with bench.waypoint_worker([agent], queue, claude=claude):
            handle = await runs.start_run(bench.client, name, "Read the report.", task_queue=queue)
            result = await handle.result()
        seconds = time.perf_counter() - started
        await client.close()
        usages = list(api.usages)
        marked = sum(_marked(r.body) for r in api.message_requests)
    usage = Usage(
        input_tokens=sum(u["input_tokens"] for u in usages),
        output_tokens=sum(u["output_tokens"] for u in usages),
        cache_creation_input_tokens=sum(u["cache_creation_input_tokens"] for u in usages),
        cache_creation_1h_input_tokens=sum(
            u["cache_creation"]["ephemeral_1h_input_tokens"] for u in usages
        ),
        cache_read_input_tokens=sum(u["cache_read_input_tokens"] for u in usages),
    )
    return Bill(
        f"caching {cache}" if cache != "off" else "no caching",
        len(usages),
        usage,
        marked,
        result.cost_usd,
        seconds,
    )


def report(bills: list[Bill], turns: int, pages: int) -> str:
    """The side-by-side table, the prices it used and the ratio against the target."""

    def row(label: str, value: Any) -> list[str]:
        return [label, *(value(b) for b in bills)]

    def per_5m(b: Bill) -> int:
        return b.usage.cache_creation_input_tokens - b.usage.cache_creation_1h_input_tokens

    rows = [
        row("model calls", lambda b: f"{b.calls}"),
        row("calls with cache markers", lambda b: f"{b.marked_calls}"),
        row("prompt tokens in all", lambda b: f"{b.usage.context_tokens:,}"),
        row("billed input tokens (uncached)", lambda b: f"{b.usage.input_tokens:,}"),
        row("cache reads", lambda b: f"{b.usage.cache_read_input_tokens:,}"),
        row("cache writes 5m", lambda b: f"{per_5m(b):,}"),
        row("cache writes 1h", lambda b: f"{b.usage.cache_creation_1h_input_tokens:,}"),
        row("output tokens", lambda b: f"{b.usage.output_tokens:,}"),
        row("input cost (USD)", lambda b: f"{b.input_cost:.4f}"),
        row("total cost (USD)", lambda b: f"{b.total_cost:.4f}"),
        row("cost Waypoint recorded (USD)", lambda b: f"{b.recorded_cost:.4f}"),
        row("seconds", lambda b: f"{b.seconds:.1f}"),
    ]
    cached, uncached = bills[0], bills[-1]
    share = cached.input_cost / uncached.input_cost if uncached.input_cost else float("nan")
    per_million = {
        "input": Usage(input_tokens=10**6),
        "cache write 5m": Usage(cache_creation_input_tokens=10**6),
        "cache write 1h": Usage(
            cache_creation_input_tokens=10**6, cache_creation_1h_input_tokens=10**6
        ),
        "cache read": Usage(cache_read_input_tokens=10**6),
        "output": Usage(output_tokens=10**6),
    }
    listed = {k: cost_usd(MODEL, u) for k, u in per_million.items()}
    prices = f"`{MODEL}` list prices via `waypoint._providers.pricing.cost_usd`: " + ", ".join(
        f"{k} {v:g}" for k, v in listed.items() if v is not None
    )
    verdict = "meets" if share <= TARGET else "misses"
    lines = [
        f"**Prompt caching**: one {turns}-turn run, about {pages:,} tokens of tool output a "
        "turn, local Messages API server (token estimate: JSON characters / 4)",
        "",
        table(["", *(b.label for b in bills)], rows),
        "",
        prices + " (USD per million tokens).",
        f"Billed input cost with caching: {share:.1%} of the uncached run's "
        f"({verdict} the {TARGET:.0%} target).",
    ]
    if uncached.marked_calls:
        lines.append(
            'The cache="off" run still sent cache_control markers: the agent\'s ModelSettings '
            "do not reach the model request yet."
        )
    if cached.marked_calls == 0:
        lines.append(
            "No request carried a cache_control marker: this Claude provider does not mark "
            "cache breakpoints yet, so both runs pay the same."
        )
    return "\n".join(lines)


async def main(turns: int, pages: int) -> None:
    """Run the cached and the uncached run on one dev server and print the table."""
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="waypoint-cost-") as tmp:
        async with env(Path(tmp)) as bench:
            bills = [await one_run(bench, cache, turns, pages) for cache in ("5m", "off")]
    print(report(bills, turns, pages) + "\n", flush=True)
    print(f"_{time.monotonic() - started:.0f} s in all._", flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--turns", type=int, default=40, help="tool turns in the run")
    parser.add_argument("--page-tokens", type=int, default=3000, help="tool output a turn")
    args = parser.parse_args()
    asyncio.run(main(args.turns, args.page_tokens))
