"""A call's arguments as people read them (`waypoint._readable`), from real tool schemas."""

from __future__ import annotations

import re
from datetime import date, datetime

from pydantic import BaseModel, Field

from waypoint._readable import REFUSED, Line, arguments, exact
from waypoint.protocol.states import STATES


class Leg(BaseModel):
    """One leg of a trip."""

    route: str = Field(description="From and to")
    departs: datetime


class Expense(BaseModel):
    """What a tool author writes: the marks on money and dates the docs describe."""

    amount_cents: int = Field(description="The amount, in cents")
    currency: str
    refund: float = Field(json_schema_extra={"format": "money", "currency_field": "currency"})
    fee: int = Field(title="Bank fee", json_schema_extra={"format": "cents", "currency": "jpy"})
    booked_on: date
    card: str | None = None
    legs: list[Leg] = []
    tags: list[str] = []
    approved: bool = False


class Claim(BaseModel):
    amount_cents: int = Field(description="The amount, in cents")
    currency: str
    fee: float = Field(title="Bank fee", json_schema_extra={"format": "money", "currency": "EUR"})
    booked_on: date


def test_a_claim_reads_as_the_tools_docs_say() -> None:
    call = {"amount_cents": 1280000, "currency": "USD", "fee": 2.5, "booked_on": "2026-03-03"}
    shown = {line.label: line.text for line in arguments(call, Claim.model_json_schema())}
    assert shown == {
        "Amount": "12,800.00 USD",
        "Currency": "USD",
        "Bank fee": "2.50 EUR",
        "Booked on": "3 March 2026",
    }


def shown(lines: list[Line]) -> dict[str, str]:
    return {line.label: line.text for line in lines}


def test_money_dates_and_labels_come_from_the_schema_the_tool_author_wrote() -> None:
    given = {
        "amount_cents": 1280000,
        "currency": "usd",
        "refund": 1234.5,
        "fee": 500,
        "booked_on": "2026-03-03",
        "card": "corp-amex-jörg",
        "approved": True,
    }
    lines = arguments(given, Expense.model_json_schema())
    assert shown(lines) == {
        "Amount": "12,800.00 USD",  # cents by its description; its currency beside it
        "Currency": "usd",
        "Refund": "1,234.50 USD",  # major units, currency from the field it names
        "Bank fee": "500 JPY",  # the schema's own title; a yen has no minor unit
        "Booked on": "3 March 2026",
        "Card": "corp-amex-jörg",  # text as text: no escapes
        "Approved": "yes",
    }
    assert lines[0].hint == "The amount, in cents"


def test_nested_objects_and_lists_follow_their_refs_in_order_then_unknown_arguments() -> None:
    given = {
        "extra_note": "LHR->JFK",
        "legs": [{"route": "LHR->JFK", "departs": "2026-03-03T14:05:00+01:00"}],
        "tags": ["urgent", "board"],
        "amount_cents": 5,
        "card": None,
    }
    lines = arguments(given, Expense.model_json_schema())
    assert [line.label for line in lines] == ["Amount", "Card", "Legs", "Tags", "Extra note"]
    legs, tags = lines[2], lines[3]
    assert [shown(item) for item in legs.items] == [
        {"Route": "LHR->JFK", "Departs": "3 March 2026, 13:05 UTC"}
    ]
    assert legs.items[0][0].hint == "From and to"
    assert [[line.text for line in item] for item in tags.items] == [["urgent"], ["board"]]
    assert shown(lines)["Amount"] == "0.05"  # no currency named: the amount alone
    assert shown(lines)["Card"] == "none"


def test_without_a_schema_arguments_still_read_as_text_and_odd_values_are_shown_as_given() -> None:
    lines = arguments({"route": "LHR->JFK", "when": "soon", "balance_cents": 250_00, "n": 3})
    assert shown(lines) == {"Route": "LHR->JFK", "When": "soon", "Balance": "250.00", "N": "3"}
    schema = {"properties": {"when": {"type": "string", "format": "date-time"}}}
    assert shown(arguments({"when": "soon"}, schema)) == {"When": "soon"}


def test_the_exact_arguments_keep_their_characters() -> None:
    text = exact({"route": "LHR->JFK", "card": "corp-amex-jörg"})
    assert '"route": "LHR->JFK"' in text and '"card": "corp-amex-jörg"' in text
    assert "\\u" not in text


def test_every_state_has_words_and_no_refusal_shows_a_status_code() -> None:
    assert all(state.label and state.means for state in STATES.values())
    assert len({state.label for state in STATES.values()}) == len(STATES)
    assert not [title for title in REFUSED.values() if re.search(r"\d", title)]
