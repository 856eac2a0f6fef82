"""What a model call cost in USD: list prices from `genai-prices`, negotiated prices from a file.

`genai-prices` is a maintained price table that ships inside the package. Waypoint reads only that
bundled data and never starts the package's `UpdatePrices` auto-update, so pricing makes no
network call; upgrading the pinned package is how prices get updated. A file named by
`WAYPOINT_PRICES` (see `use_price_file`) overrides it with negotiated prices. A model with no
known price costs `None` (unknown), never a guessed number, so a budget can tell "free" from
"not priced".

Anthropic, Bedrock (`us.anthropic.claude-sonnet-4-5-20250929-v1:0`) and Vertex
(`claude-sonnet-4-5@20250929`) ids are priced at their own platform's rates, which differ
(Bedrock's regional endpoints cost 10% more than its global ones). A Bedrock or Vertex id the
package does not list falls back to Anthropic's list price for the same model.
"""

from __future__ import annotations

import json
import logging
import re
import tomllib
from datetime import UTC, datetime
from decimal import Decimal
from functools import cache
from pathlib import Path

import genai_prices
from genai_prices.data_snapshot import get_snapshot
from genai_prices.types import ModelInfo, ModelPrice, Tier, TieredPrices
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from waypoint._providers.claude.catalog import canonical_model_id
from waypoint._providers.scripts import SCRIPTED_MODEL_ID
from waypoint.errors import PriceFileError
from waypoint.protocol import CallPrice, PriceTier, Usage
from waypoint.protocol.billing import BILLED_USES

logger = logging.getLogger(__name__)

ONE_HOUR_WRITE = 2.0
"""Anthropic bills a 1-hour cache write at 2x the base input price."""
FIVE_MINUTE_WRITE = 1.25
"""A 5-minute cache write costs 1.25x the base input price."""
CACHE_READ = 0.1
"""A cache read costs 0.1x the base input price on most models."""


class Price(BaseModel):
    """Negotiated prices of one model, USD per million tokens.

    A cache rate left out follows Anthropic's multipliers of `input`: 1.25x for a 5-minute
    write, 2x for a 1-hour write, 0.1x for a read.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, allow_inf_nan=False)

    input: float = Field(ge=0)
    output: float = Field(ge=0)
    cache_write_5m: float | None = Field(default=None, ge=0)
    cache_write_1h: float | None = Field(default=None, ge=0)
    cache_read: float | None = Field(default=None, ge=0)
    web_searches_per_1k: float = Field(default=10.0, ge=0)
    """USD per thousand `web_search` requests (Anthropic's list price unless negotiated)."""

    def cost(self, usage: Usage) -> float:
        """USD for one call's usage at these prices."""
        one_hour = usage.cache_creation_1h_input_tokens
        five_minute = max(usage.cache_creation_input_tokens - one_hour, 0)

        def rate(price: float | None, multiplier: float) -> float:
            return self.input * multiplier if price is None else price

        return (
            usage.input_tokens * self.input
            + usage.output_tokens * self.output
            + five_minute * rate(self.cache_write_5m, FIVE_MINUTE_WRITE)
            + one_hour * rate(self.cache_write_1h, ONE_HOUR_WRITE)
            + usage.cache_read_input_tokens * rate(self.cache_read, CACHE_READ)
        ) / 1_000_000 + sum(
            getattr(usage, u.usage) * getattr(self, u.override) / 1000 for u in BILLED_USES
        )


_overrides: dict[str, Price] = {}
"""Negotiated prices by lower-cased model id, set by `use_price_file`."""

_warned: set[str] = set()

_BEDROCK = re.compile(r"^(?:[a-z-]+\.)?anthropic\.")


def _platform(model: str) -> str:
    """The genai-prices provider whose rates apply to this id."""
    model = model.strip().lower()
    if _BEDROCK.match(model):
        return "aws"
    if "@" in model:
        return "google"
    return "anthropic"


def _is_newer_version(canonical: str, listed: str) -> bool:
    """True when a prefix match would price `claude-opus-4-50` as `claude-opus-4-5`."""
    listed = canonical_model_id(listed)
    return canonical.startswith(listed) and canonical[len(listed) : len(listed) + 1].isdigit()


@cache
def _listed_model(model: str) -> ModelInfo | None:
    """The genai-prices entry for an id: its platform's first, then Anthropic's list price."""
    canonical = canonical_model_id(model)
    candidates = [(model.strip().lower(), _platform(model)), (canonical, "anthropic")]
    for ref, provider_id in candidates:
        try:
            _, info = get_snapshot().find_provider_model(ref, None, provider_id, None)
        except LookupError:
            continue
        if not _is_newer_version(canonical, info.id):
            return info
    return None


def _scaled(price: Decimal | TieredPrices, factor: Decimal) -> Decimal | TieredPrices:
    if isinstance(price, Decimal):
        return price * factor
    tiers = [Tier(start=t.start, price=t.price * factor) for t in price.tiers]
    return TieredPrices(base=price.base * factor, tiers=tiers)


def _with_one_hour_rate(price: ModelPrice) -> ModelPrice:
    """The price with a 1-hour cache write rate, 2x base input where genai-prices lacks one.

    genai-prices lists a separate 1-hour rate for most Claude entries; a few (older Bedrock and
    Vertex ones) have none and would bill 1-hour writes at the 5-minute rate.
    """
    base = price.input_mtok
    if price.cache_write_1h_mtok is not None or base is None:
        return price
    rates = {**price.__dict__, "cache_write_1h_mtok": _scaled(base, Decimal(str(ONE_HOUR_WRITE)))}
    return ModelPrice(**rates)


def _list_cost(info: ModelInfo, usage: Usage) -> float:
    # genai-prices counts input tokens with the cached ones included (long-context tiers use
    # that total), and cache writes with the 1-hour ones included, as Anthropic bills them.
    writes = max(usage.cache_creation_input_tokens, usage.cache_creation_1h_input_tokens)
    counted = genai_prices.Usage(
        input_tokens=usage.input_tokens + writes + usage.cache_read_input_tokens,
        output_tokens=usage.output_tokens,
        cache_write_tokens=writes,
        cache_write_1h_tokens=usage.cache_creation_1h_input_tokens,
        cache_read_tokens=usage.cache_read_input_tokens,
    )
    for u in BILLED_USES:  # billed per use, through the library's rate
        if getattr(usage, u.usage):
            setattr(counted, u.listed, getattr(usage, u.usage))
    price = _with_one_hour_rate(info.get_prices(datetime.now(tz=UTC)))
    return float(price.calc_price(counted)["total_price"])


def _override(model: str) -> Price | None:
    return _overrides.get(model.strip().lower()) or _overrides.get(canonical_model_id(model))


def price_known(model: str) -> bool:
    """True when `cost_usd` can price this model (so `max_cost_usd` can be enforced)."""
    if model == SCRIPTED_MODEL_ID or _override(model) is not None:
        return True
    return _listed_model(model) is not None


def call_price(model: str, cache: str = "5m") -> CallPrice | None:
    """The model's worst-case rates for a run to snapshot, or None when no price is known.

    A prompt token is priced at the dearest way it may be billed: plain input, or a cache write
    of the run's TTL (`cache`: `5m`, `1h` or `off`).
    """
    if model == SCRIPTED_MODEL_ID:
        return CallPrice(tiers=[PriceTier(input=0.0, output=0.0)])
    if (override := _override(model)) is not None:
        write = {"5m": (override.cache_write_5m, FIVE_MINUTE_WRITE)}.get(
            cache, (override.cache_write_1h, ONE_HOUR_WRITE)
        )
        rate = override.input * write[1] if write[0] is None else write[0]
        dearest = override.input if cache == "off" else max(override.input, rate)
        per_use = {u.per_use: getattr(override, u.override) / 1000 for u in BILLED_USES}
        return CallPrice.model_validate(
            {"tiers": [PriceTier(input=dearest, output=override.output)], **per_use}
        )
    if (info := _listed_model(model)) is None:
        return None
    price = _with_one_hour_rate(info.get_prices(datetime.now(tz=UTC)))
    writes = {"5m": price.cache_write_mtok, "1h": price.cache_write_1h_mtok}
    rates = [price.input_mtok, writes.get(cache)]
    starts = {0} | {
        t.start for r in [*rates, price.output_mtok] if isinstance(r, TieredPrices) for t in r.tiers
    }
    tiers = [
        PriceTier(
            from_tokens=start,
            input=max(_rate_at(r, start) for r in rates),
            output=_rate_at(price.output_mtok, start),
        )
        for start in sorted(starts)
    ]
    per_use = {
        u.per_use: float(getattr(price, f"{u.listed}_kcount", None) or 0) / 1000
        for u in BILLED_USES
    }
    return CallPrice.model_validate({"tiers": tiers, **per_use})


def _rate_at(price: Decimal | TieredPrices | None, tokens: int) -> float:
    """USD per million tokens for a prompt of `tokens` tokens (0 when there is no such rate)."""
    if price is None:
        return 0.0
    if isinstance(price, Decimal):
        return float(price)
    reached = [t.price for t in price.tiers if tokens >= t.start]
    return float(reached[-1] if reached else price.base)


def cost_usd(model: str, usage: Usage) -> float | None:
    """The cost of one call, or None when no price is known for the model."""
    if model == SCRIPTED_MODEL_ID:
        return 0.0
    if (override := _override(model)) is not None:
        return override.cost(usage)
    if (info := _listed_model(model)) is not None:
        return _list_cost(info, usage)
    if model not in _warned:
        _warned.add(model)
        logger.warning(
            "No price for model %r: its cost is reported as unknown. "
            "Add it to a WAYPOINT_PRICES file to count it against max_cost_usd.",
            model,
        )
    return None


def load_price_file(path: Path) -> dict[str, Price]:
    """Negotiated prices from a TOML (or `.json`) file mapping model ids to `Price` fields.

    Raises:
        PriceFileError: The file cannot be read or parsed, or an entry is malformed.
    """
    kind = "JSON" if path.suffix.lower() == ".json" else "TOML"
    try:
        text = path.read_text(encoding="utf-8")
        raw = json.loads(text) if kind == "JSON" else tomllib.loads(text)
    except OSError as err:
        raise PriceFileError(f"price file {path}: cannot read it: {err.strerror}") from None
    except ValueError as err:  # JSONDecodeError, TOMLDecodeError, UnicodeDecodeError
        raise PriceFileError(f"price file {path}: not valid {kind}: {err}") from None
    if not isinstance(raw, dict):
        raise PriceFileError(f"price file {path}: must map model ids to prices")
    prices: dict[str, Price] = {}
    for model, entry in raw.items():
        try:
            prices[str(model).strip().lower()] = Price.model_validate(entry)
        except ValidationError as err:
            first = err.errors()[0]
            field = ".".join(str(part) for part in first["loc"])
            where = f"{model!r}" + (f" field {field!r}" if field else "")
            raise PriceFileError(
                f"price file {path}: {where}: {first['msg']} "
                "(each model takes input, output and optionally cache_write_5m, cache_write_1h, "
                "cache_read, in USD per million tokens)"
            ) from None
    return prices


def use_price_file(path: Path | None) -> None:
    """Price with the negotiated prices in this file from now on; None uses list prices only.

    Raises:
        PriceFileError: The file is malformed; the prices in use stay as they were.
    """
    prices = load_price_file(path) if path is not None else {}
    _overrides.clear()
    _overrides.update(prices)
