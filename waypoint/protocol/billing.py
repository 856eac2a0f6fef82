"""What a model call is billed for: its tokens, and the server tools Anthropic bills per use.

`SERVER_USES` is the one table of server-tool usage: the API's count (`usage.server_tool_use`),
the `Usage` field that records it and, for a tool billed per use, the names its price goes by.
A new billed server tool is a row here with its `Usage` and `CallPrice` fields, and its price
(`waypoint._providers.pricing.Price`); conversion, cost, reservation and refusals read the table.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import Field

from waypoint.protocol.base import _Frozen


@dataclass(frozen=True)
class ServerUse:
    """A Claude server tool's uses as the API counts them, and how each use is priced."""

    tool: str
    """Its name in the spec's `server_tools` (whose `max_uses` caps one call's uses)."""
    usage: str
    """The count's field in the API's `usage.server_tool_use`, and in `Usage`."""
    units: str
    """What it counts, for people: `searches`."""
    per_use: str = ""
    """`CallPrice`'s field, USD per use, reserved before a call; '' when billed as tokens only."""
    listed: str = ""
    """genai-prices' name: its `Usage` field, and with `_kcount` its USD per thousand."""
    override: str = ""
    """The price file's field (`pricing.Price`), USD per thousand."""


SERVER_USES = (
    ServerUse("web_search", "web_search_requests", "searches", "per_search", "web_searches",
              "web_searches_per_1k"),
    ServerUse("web_fetch", "web_fetch_requests", "pages"),  # billed as the tokens they add
)  # fmt: skip
BILLED_USES = tuple(u for u in SERVER_USES if u.per_use)
"""The server tools billed per use."""


class Usage(_Frozen):
    """Tokens billed for one model call."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    """Cache writes of both TTLs; the 1-hour part is also in the field below."""
    cache_creation_1h_input_tokens: int = 0
    """The part of the cache writes made with the 1-hour TTL (priced higher)."""
    cache_read_input_tokens: int = 0
    web_search_requests: int = Field(default=0, exclude_if=lambda v: not v)
    """Searches Claude's `web_search` server tool made in the call (billed per search)."""
    web_fetch_requests: int = Field(default=0, exclude_if=lambda v: not v)
    """Pages its `web_fetch` tool read (billed as the tokens they add)."""

    @property
    def context_tokens(self) -> int:
        """What the model read: the size of the prompt, cached or not."""
        return self.input_tokens + self.cache_creation_input_tokens + self.cache_read_input_tokens

    @property
    def total(self) -> int:
        """All tokens of the call, cached or not."""
        return (
            self.input_tokens
            + self.output_tokens
            + self.cache_creation_input_tokens
            + self.cache_read_input_tokens
        )


class PriceTier(_Frozen):
    """A model's rates, USD per million tokens, for a prompt of at least `from_tokens` tokens."""

    from_tokens: int = 0
    input: float
    """A prompt token at its dearest: the input rate or the cache write rate, whichever is more."""
    output: float


class CallPrice(_Frozen):
    """What the run's model costs at worst, snapshotted at start so a call can reserve it.

    The workflow cannot look prices up (no I/O); `waypoint._providers.pricing.call_price`
    fills this in.
    """

    tiers: list[PriceTier]
    """Ascending by `from_tokens`; a prompt that reaches a tier pays its rates on all tokens."""
    per_search: float = Field(default=0.0, ge=0, exclude_if=lambda v: not v)
    """USD per `web_search` request: a call reserves its `max_uses` of them."""
