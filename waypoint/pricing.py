"""What a model call cost in USD, from Anthropic's list prices.

Prices are USD per million tokens and change rarely; update the table when Anthropic's pricing
page does. A model that is not in the table costs `None` (unknown), never a guessed number, so
a budget can tell "free" from "not priced".
"""

from __future__ import annotations

import logging
import re
from typing import NamedTuple

from waypoint.models import Usage

logger = logging.getLogger(__name__)


class Price(NamedTuple):
    """List prices of one model, USD per million tokens."""

    input: float
    output: float
    cache_write: float
    """A 5-minute cache write; 1-hour writes cost more but `Usage` does not separate them."""
    cache_read: float


def _standard(input_price: float, output_price: float) -> Price:
    """The usual shape: a cache write costs 1.25x input, a cache read 0.1x input."""
    return Price(input_price, output_price, input_price * 1.25, input_price * 0.1)


PRICES: dict[str, Price] = {
    # Opus
    "claude-opus-5": _standard(5, 25),
    "claude-opus-4-8": _standard(5, 25),
    "claude-opus-4-7": _standard(5, 25),
    "claude-opus-4-6": _standard(5, 25),
    "claude-opus-4-5": _standard(5, 25),
    "claude-opus-4-1": _standard(15, 75),
    "claude-opus-4-0": _standard(15, 75),
    "claude-opus-4": _standard(15, 75),
    # Sonnet
    "claude-sonnet-5": _standard(2, 10),
    "claude-sonnet-4-6": _standard(3, 15),
    "claude-sonnet-4-5": _standard(3, 15),
    "claude-sonnet-4-0": _standard(3, 15),
    "claude-sonnet-4": _standard(3, 15),
    # Haiku
    "claude-haiku-4-5": _standard(1, 5),
    "claude-3-5-haiku": _standard(0.80, 4),
    # Fable and Mythos: cache writes follow the rule, cache reads do not.
    "claude-fable-5-1": Price(10, 50, 12.50, 0.25),
    "claude-mythos-5-1": Price(10, 50, 12.50, 0.25),
    "claude-fable-5": Price(10, 50, 12.50, 1),
    "claude-mythos-5": Price(10, 50, 12.50, 1),
}
"""List prices by model id without its date suffix."""

_SNAPSHOT_SUFFIX = re.compile(r"-(\d{8}|latest)$")

_warned: set[str] = set()


def price_of(model: str) -> Price | None:
    """The list price of a model id, dated (`claude-sonnet-4-5-20250929`) or not."""
    price = PRICES.get(model)
    if price is None:
        # Strip only a date, never a version: `claude-sonnet-5-5` is not `claude-sonnet-5`.
        price = PRICES.get(_SNAPSHOT_SUFFIX.sub("", model))
    return price


def cost_usd(model: str, usage: Usage) -> float | None:
    """The cost of one call, or None when the model is not in the price table."""
    price = price_of(model)
    if price is None:
        if model not in _warned:
            _warned.add(model)
            logger.warning(
                "No price for model %r: its cost is reported as unknown. "
                "Add it to waypoint.pricing.PRICES to count it against max_cost_usd.",
                model,
            )
        return None
    return (
        usage.input_tokens * price.input
        + usage.output_tokens * price.output
        + usage.cache_creation_input_tokens * price.cache_write
        + usage.cache_read_input_tokens * price.cache_read
    ) / 1_000_000
