"""Model prices: bundled list prices, platform ids, cache TTLs, the override file."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import genai_prices
import pytest
from temporalio.client import Client

from waypoint._providers.pricing import call_price, cost_usd, price_known, use_price_file
from waypoint._worker import worker_from_settings
from waypoint.errors import PriceFileError
from waypoint.protocol import PriceTier, Usage
from waypoint.settings import Settings

M = 1_000_000


@pytest.fixture(autouse=True)
def list_prices_only() -> Iterator[None]:
    use_price_file(None)
    yield
    use_price_file(None)


def costs(model: str) -> tuple[float | None, float | None]:
    """USD for 0.1M input tokens and for 1M output tokens (below any long-context tier)."""
    return cost_usd(model, Usage(input_tokens=M // 10)), cost_usd(model, Usage(output_tokens=M))


def approx(*prices: float) -> tuple[object, ...]:
    return tuple(pytest.approx(p) for p in prices)


# --- List prices ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "input_price", "output_price"),
    [
        ("claude-sonnet-4-6", 3, 15),
        ("claude-sonnet-4-5", 3, 15),
        ("claude-opus-4-6", 5, 25),
        ("claude-opus-4-5", 5, 25),
        ("claude-opus-4-1", 15, 75),
        ("claude-haiku-4-5", 1, 5),
        ("claude-3-5-haiku", 0.8, 4),
    ],
)
def test_current_models_are_priced_at_their_list_price(
    model: str, input_price: float, output_price: float
) -> None:
    assert costs(model) == approx(input_price / 10, output_price)
    assert price_known(model)


def test_the_5_5_generation_is_priced() -> None:
    known = {m: costs(m) for m in ("claude-opus-5-5", "claude-sonnet-5-5", "claude-haiku-5-5")}
    print(
        f"genai-prices {genai_prices.__version__}, 5.5 generation (USD/0.1M in, /1M out): {known}"
    )

    assert known["claude-opus-5-5"] == approx(0.4, 20)
    assert known["claude-sonnet-5-5"] == approx(0.2, 10)
    assert known["claude-haiku-5-5"] == approx(0.01, 0.5)
    # Haiku 5.5 bills every token of a prompt above 100k tokens at 5x.
    assert cost_usd("claude-haiku-5-5", Usage(input_tokens=200_000)) == pytest.approx(0.1)


def test_long_prompt_tier_counts_cached_tokens_as_prompt() -> None:
    short = Usage(input_tokens=10_000, cache_read_input_tokens=150_000, output_tokens=M)
    long = short.model_copy(update={"cache_read_input_tokens": 195_000})

    # Sonnet 4.5 prompts above 200k tokens are billed at $6 in, $22.50 out.
    assert cost_usd("claude-sonnet-4-5", short) == pytest.approx((30_000 + 45_000 + 15 * M) / M)
    assert cost_usd("claude-sonnet-4-5", long) == pytest.approx((60_000 + 117_000 + 22.5 * M) / M)


# --- Model ids of every platform ------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "same_as"),
    [
        ("claude-sonnet-4-5-20250929", "claude-sonnet-4-5"),
        ("claude-opus-4-1-20250805", "claude-opus-4-1"),
        ("claude-haiku-4-5-20251001", "claude-haiku-4-5"),
        ("claude-3-5-haiku-20241022", "claude-3-5-haiku"),
        ("claude-opus-4-20250514", "claude-opus-4-0"),
        ("claude-opus-5-5-latest", "claude-opus-5-5"),
        ("global.anthropic.claude-sonnet-4-5-20250929-v1:0", "claude-sonnet-4-5"),
        ("global.anthropic.claude-opus-4-6-v1:0", "claude-opus-4-6"),
        ("claude-sonnet-4-5@20250929", "claude-sonnet-4-5"),
        ("claude-opus-4-1@20250805", "claude-opus-4-1"),
        ("claude-haiku-4-5@20251001", "claude-haiku-4-5"),
        ("claude-sonnet-5-5@20260101", "claude-sonnet-5-5"),
    ],
)
def test_dated_bedrock_and_vertex_ids_are_priced_as_their_model(model: str, same_as: str) -> None:
    assert costs(model) == costs(same_as) != (None, None)
    assert price_known(model)


@pytest.mark.parametrize("prefix", ["", "us.", "eu.", "apac."])
def test_bedrock_regional_endpoints_cost_ten_percent_more(prefix: str) -> None:
    model = f"{prefix}anthropic.claude-sonnet-4-5-20250929-v1:0"
    assert costs(model) == approx(0.33, 16.5)


def test_a_newer_version_is_not_priced_as_an_older_one() -> None:
    for model in (
        "claude-opus-4-50",
        "claude-opus-4-99",
        "claude-sonnet-5-5-pricing-test",
        "us.anthropic.claude-opus-4-50-v1:0",
    ):
        assert cost_usd(model, Usage(input_tokens=1)) is None, model
        assert not price_known(model)


def test_unknown_model_costs_none_never_a_guess() -> None:
    assert cost_usd("claude-unpriced-pricing-test", Usage(input_tokens=1, output_tokens=1)) is None
    assert cost_usd("gpt-4o", Usage(input_tokens=1)) is None
    assert not price_known("claude-unpriced-pricing-test")


def test_scripted_model_is_free() -> None:
    assert cost_usd("scripted", Usage(input_tokens=M, output_tokens=M)) == 0.0
    assert price_known("scripted")


# --- Cache writes and reads -----------------------------------------------------------------


def test_one_hour_cache_writes_cost_more_than_five_minute_ones() -> None:
    five_minute = Usage(cache_creation_input_tokens=100_000)
    one_hour = Usage(cache_creation_input_tokens=100_000, cache_creation_1h_input_tokens=100_000)
    mixed = Usage(
        input_tokens=1_000,
        output_tokens=1_000,
        cache_creation_input_tokens=100_000,
        cache_creation_1h_input_tokens=40_000,
        cache_read_input_tokens=50_000,
    )

    # Sonnet 4.6: $3 input, so $3.75 a 5-minute write, $6 a 1-hour write, $0.30 a read.
    assert cost_usd("claude-sonnet-4-6", five_minute) == pytest.approx(0.375)
    assert cost_usd("claude-sonnet-4-6", one_hour) == pytest.approx(0.6)
    expected = 1_000 * 3 + 1_000 * 15 + 60_000 * 3.75 + 40_000 * 6 + 50_000 * 0.3
    assert cost_usd("claude-sonnet-4-6", mixed) == pytest.approx(expected / M)


def test_one_hour_rate_is_twice_input_where_the_package_lists_none() -> None:
    model = "global.anthropic.claude-sonnet-4-20250514-v1:0"
    listed = genai_prices.calc_price(genai_prices.Usage(input_tokens=1), model, provider_id="aws")
    assert listed.model_price.cache_write_1h_mtok is None

    one_hour = Usage(cache_creation_input_tokens=100_000, cache_creation_1h_input_tokens=100_000)
    assert cost_usd(model, one_hour) == pytest.approx(0.6)
    assert cost_usd(model, Usage(cache_creation_input_tokens=100_000)) == pytest.approx(0.375)


# --- The override file ----------------------------------------------------------------------

NEGOTIATED = """\
# USD per million tokens
[claude-sonnet-4-5]
input = 2
output = 10
cache_write_5m = 2.5
cache_write_1h = 4
cache_read = 0.2

["us.anthropic.claude-sonnet-4-5-20250929-v1:0"]
input = 2.2
output = 11

[claude-private-model]
input = 1
output = 2
"""


def test_override_file_wins_over_list_prices(tmp_path: Path) -> None:
    path = tmp_path / "prices.toml"
    path.write_text(NEGOTIATED)
    use_price_file(path)

    # An entry for the model id covers its dated, Bedrock and Vertex ids...
    for model in ("claude-sonnet-4-5", "claude-sonnet-4-5-20250929", "claude-sonnet-4-5@20250929"):
        assert costs(model) == approx(0.2, 10)
    writes = Usage(
        cache_creation_input_tokens=300_000,
        cache_creation_1h_input_tokens=100_000,
        cache_read_input_tokens=M,
    )
    assert cost_usd("claude-sonnet-4-5", writes) == pytest.approx(0.5 + 0.4 + 0.2)
    # ...unless the exact id has its own; cache rates left out follow Anthropic's multipliers.
    bedrock = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"
    assert costs(bedrock) == approx(0.22, 11)
    assert cost_usd(bedrock, writes) == pytest.approx(
        (200_000 * 2.75 + 100_000 * 4.4 + M * 0.22) / M
    )
    # A model genai-prices does not know becomes priced; other models keep list prices.
    assert price_known("claude-private-model")
    assert costs("claude-private-model") == approx(0.1, 2)
    assert costs("claude-opus-4-6") == approx(0.5, 25)

    use_price_file(None)
    assert not price_known("claude-private-model")


def test_override_file_may_be_json(tmp_path: Path) -> None:
    path = tmp_path / "prices.json"
    path.write_text(json.dumps({"claude-opus-4-6": {"input": 4, "output": 20}}))
    use_price_file(path)

    assert costs("claude-opus-4-6-20260101") == approx(0.4, 20)


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("[claude-sonnet-4-5\ninput = 2\n", "not valid TOML"),
        ("[claude-sonnet-4-5]\ninput = 2\n", "'claude-sonnet-4-5' field 'output': Field required"),
        ("[claude-sonnet-4-5]\ninput = -2\noutput = 10\n", "greater than or equal to 0"),
        ('[claude-sonnet-4-5]\ninput = "2"\noutput = 10\n', "field 'input'"),
        ("[claude-sonnet-4-5]\ninput = 2\noutput = 10\ncache_write = 3\n", "'cache_write'"),
        ("claude-sonnet-4-5 = 2\n", "'claude-sonnet-4-5': Input should be"),
    ],
)
def test_malformed_override_file_is_one_clear_line(
    tmp_path: Path, content: str, problem: str
) -> None:
    good = tmp_path / "good.toml"
    good.write_text(NEGOTIATED)
    use_price_file(good)
    path = tmp_path / "prices.toml"
    path.write_text(content)

    with pytest.raises(PriceFileError) as err:
        use_price_file(path)

    message = str(err.value)
    assert str(path) in message and problem in message and "\n" not in message
    # The prices in use stay as they were.
    assert price_known("claude-private-model")


def test_missing_override_file_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.toml"
    with pytest.raises(PriceFileError, match="nope.toml: cannot read it"):
        use_price_file(path)


async def test_worker_applies_the_prices_file_from_settings(client: Client, tmp_path: Path) -> None:
    path = tmp_path / "prices.toml"
    path.write_text(NEGOTIATED)

    worker_from_settings(client, [], Settings(prices_file=path, transcript_store=tmp_path))
    assert price_known("claude-private-model")

    path.write_text("[claude-private-model]\ninput = 1\n")
    with pytest.raises(PriceFileError, match="field 'output'"):
        worker_from_settings(client, [], Settings(prices_file=path, transcript_store=tmp_path))


# --- Offline --------------------------------------------------------------------------------


def test_prices_need_no_network() -> None:
    script = textwrap.dedent(
        """
        import socket

        def refuse(*args, **kwargs):
            raise AssertionError("pricing tried to use the network")

        socket.socket.connect = refuse
        socket.create_connection = refuse
        socket.getaddrinfo = refuse

        from genai_prices import data_snapshot
        from waypoint.protocol import Usage
        from waypoint._providers.pricing import cost_usd

        assert cost_usd("claude-sonnet-4-6", Usage(input_tokens=1_000_000)) == 3.0
        assert cost_usd("us.anthropic.claude-opus-4-6-v1:0", Usage(output_tokens=1)) is not None
        assert data_snapshot.get_snapshot().from_auto_update is False
        """
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)


def test_a_run_snapshots_its_models_dearest_rates_for_reservations(tmp_path: Path) -> None:
    """A prompt token at its dearest (a cache write of the run's TTL); long prompts tiered."""
    listed = call_price("claude-sonnet-4-5", "5m")
    assert listed is not None
    assert [(t.from_tokens, t.input, t.output) for t in listed.tiers] == [
        (0, 3.75, 15.0),
        (200_000, 7.5, 22.5),
    ]
    assert call_price("claude-sonnet-4-5", "off").tiers[0].input == 3.0  # type: ignore[union-attr]
    assert call_price("claude-unpriced-pricing-test") is None
    path = tmp_path / "prices.json"
    path.write_text(json.dumps({"claude-private-model": {"input": 2, "output": 8}}))
    use_price_file(path)
    try:
        negotiated = call_price("claude-private-model", "1h")
        assert negotiated is not None and negotiated.tiers == [PriceTier(input=4.0, output=8.0)]
    finally:
        use_price_file(None)
