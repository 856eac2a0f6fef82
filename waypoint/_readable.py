"""What people read: a call's arguments from its tool's schema, states and refusals.

The console shows what a reviewer approves as labelled text, not JSON: each argument under its
schema `title` (or its name, in words), with its `description` beside it, and the value as text
(Jinja escapes it for HTML, and nothing else: `LHR->JFK` stays `LHR->JFK`). A tool author marks
money and dates in the schema (docs/getting-started.md, "How people see a call"):
- `format: "date"` / `"date-time"` (pydantic sets them for `date` / `datetime` fields);
- `format: "money"` (an amount in major units) or `"cents"` (in minor units: an integer field
  named `..._cents`, or whose description says "cents" or "minor units", counts too), with its
  currency from `currency` ("USD") or `currency_field` (the argument naming it) in the same
  schema, else from a sibling argument named `currency`.
States are said in words from `waypoint.protocol.states.STATES`; step statuses and refusals
here, with no HTTP status code (the `/glossary` page explains what stays technical).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from decimal import Decimal, InvalidOperation
from typing import Any

MINOR_DIGITS = {"JPY": 0, "KRW": 0, "VND": 0, "CLP": 0, "ISK": 0, "UGX": 0, "XOF": 0, "XAF": 0,
                "BHD": 3, "JOD": 3, "KWD": 3, "OMR": 3, "TND": 3, "LYD": 3, "IQD": 3}  # fmt: skip
"""ISO 4217 currencies whose minor unit is not a hundredth (all others: 2 digits)."""
STEP_STATUS = {
    "scheduled": "running",
    "completed": "done",
    "error": "failed",
    "rejected": "rejected",
    "aborted": "abandoned",
    "cancelled": "cancelled",
    "awaiting_approval": "waiting for approval",
    "awaiting_answer": "waiting for an answer",
    "needs_reconciliation": "unclear: needs a person",
}
"""A ledger step's status, in words."""
REFUSED = {
    400: "That request could not be read",
    401: "Please sign in",
    403: "You cannot do that here",
    404: "Nothing found there",
    405: "That cannot be done here",
    409: "This changed since you opened it",
    413: "That is too large",
    415: "That could not be read",
    422: "Something in the form needs fixing",
    429: "Too many tries: wait a moment",
    503: "Not reachable right now: try again shortly",
}
"""A refusal's heading for people, by its HTTP status (never shown itself)."""
CENTS_WORDS = re.compile(r"\b(cents?|minor units?)\b", re.IGNORECASE)


@dataclass(frozen=True)
class Line:
    """One argument as a person reads it: a label, what it means, and its value as text.

    An object's fields are `lines`; a list's entries are `items` (each a list of lines, or one
    line with its `text`).
    """

    label: str
    text: str = ""
    hint: str = ""
    lines: list[Line] = field(default_factory=list)
    items: list[list[Line]] = field(default_factory=list)


def arguments(values: dict[str, Any], schema: dict[str, Any] | None = None) -> list[Line]:
    """The lines of a call's arguments, in the schema's order, then any it does not name."""
    schema = schema or {}
    return _object(values, schema, schema)


def exact(values: Any) -> str:
    """The exact JSON a person approves, as text: indented, non-ASCII kept as it is (no escapes)."""
    return json.dumps(values, indent=2, ensure_ascii=False, sort_keys=False)


def _object(values: dict[str, Any], schema: dict[str, Any], root: dict[str, Any]) -> list[Line]:
    properties: dict[str, Any] = schema.get("properties") or {}
    names = [n for n in properties if n in values] + [n for n in values if n not in properties]
    return [_line(name, values[name], _resolve(properties.get(name), root), values, root)
            for name in names]  # fmt: skip


def _line(
    name: str, value: Any, schema: dict[str, Any], siblings: dict[str, Any], root: dict[str, Any]
) -> Line:
    money = _money_kind(name, value, schema)
    label = _label(name, schema, money)
    hint = str(schema.get("description") or "")
    if isinstance(value, dict):
        return Line(label, hint=hint, lines=_object(value, schema, root))
    if isinstance(value, list):
        entry = _resolve(schema.get("items"), root)
        items = [
            _object(v, entry, root) if isinstance(v, dict) else [_line("", v, entry, {}, root)]
            for v in value
        ]
        return Line(label, hint=hint, items=items, text="" if value else "none")
    if money:
        return Line(label, _money(value, money, _currency(schema, siblings)), hint)
    return Line(label, _scalar(value, str(schema.get("format") or "")), hint)


def _resolve(schema: Any, root: dict[str, Any]) -> dict[str, Any]:
    """A property's own schema: `$ref`s into `$defs` followed, `Optional`'s null branch dropped."""
    if not isinstance(schema, dict):
        return {}
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/"):
        target: Any = root
        for part in ref[2:].split("/"):
            target = target.get(part, {}) if isinstance(target, dict) else {}
        return {**_resolve(target, root), **{k: v for k, v in schema.items() if k != "$ref"}}
    branches = [b for b in schema.get("anyOf") or [] if b != {"type": "null"}]
    if len(branches) == 1:
        return {**_resolve(branches[0], root), **{k: v for k, v in schema.items() if k != "anyOf"}}
    return schema


def _label(name: str, schema: dict[str, Any], money: str) -> str:
    words = name.replace("_", " ").strip()
    title = str(schema.get("title") or "")
    if not title or title == words.title():  # pydantic's own title: say the name in words
        title = words[:1].upper() + words[1:]
    if money == "cents" and title.lower().endswith(" cents"):
        title = title[: -len(" cents")]
    return title


def _money_kind(name: str, value: Any, schema: dict[str, Any]) -> str:
    """`cents`, `money`, or '' when the schema does not say the value is an amount."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return ""
    given = schema.get("format")
    if given in ("money", "cents"):
        return str(given)
    described = CENTS_WORDS.search(str(schema.get("description") or ""))
    if isinstance(value, int) and (name.endswith("_cents") or described):
        return "cents"
    return ""


def _currency(schema: dict[str, Any], siblings: dict[str, Any]) -> str:
    code = schema.get("currency") or siblings.get(str(schema.get("currency_field") or "currency"))
    return code.upper() if isinstance(code, str) and len(code) == 3 and code.isalpha() else ""


def _money(value: Any, kind: str, currency: str) -> str:
    """`12,800.00 USD`: the amount with its currency's digits, or the value as given."""
    digits = MINOR_DIGITS.get(currency, 2)
    try:
        amount = Decimal(str(value))
    except InvalidOperation:
        return str(value)
    if kind == "cents":
        amount = amount.scaleb(-digits)
    shown = f"{amount:,.{digits}f}"
    return f"{shown} {currency}" if currency else shown


def _scalar(value: Any, form: str) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, str) and form in ("date", "date-time"):
        return when(value) or value
    return str(value)


def when(iso: str) -> str:
    """`3 March 2026` or `3 March 2026, 14:05 UTC`; '' for what is not an ISO date or time."""
    try:
        moment = datetime.fromisoformat(iso.replace("Z", "+00:00"))
    except ValueError:
        return ""
    if "T" not in iso and " " not in iso.strip():
        day: date = moment.date()
        return f"{day.day} {day:%B %Y}"
    zone = ""
    if moment.tzinfo is not None:
        moment, zone = moment.astimezone(UTC), " UTC"
    return f"{moment.day} {moment:%B %Y, %H:%M}{zone}"
