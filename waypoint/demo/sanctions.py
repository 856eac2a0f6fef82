"""Screening a company name against the demo's sanctions list.

Names are compared after normalising case, accents, punctuation and trailing legal forms
(`GmbH`, `Ltd.`, `S.A.`, ...), so "golden crane shipping" matches "Golden Crane Shipping Co.".
The country is reported next to each match but never narrows it: a listed name is a hit
wherever the company says it is registered.
"""

from __future__ import annotations

import csv
import re
import unicodedata
from pathlib import Path
from typing import Any

from waypoint.demo.documents import SANCTIONS_FILE

LEGAL_FORMS = frozenset(
    "ag bv ca co company corp corporation fze fzco gmbh inc jsc kg limited llc llp ltd "
    "nv ojsc oy pjsc plc pte sa sarl sas spa srl".split()
)


def normalize_name(name: str) -> str:
    """The comparable core of a company name: lower case, ASCII, no punctuation or legal form."""
    ascii_name = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode()
    folded = ascii_name.casefold().replace("&", " and ").replace(".", "")
    tokens = re.sub(r"[^a-z0-9]+", " ", folded).split()
    while len(tokens) > 1 and tokens[-1] in LEGAL_FORMS:
        tokens.pop()
    return " ".join(tokens)


def load_list(path: Path = SANCTIONS_FILE) -> list[dict[str, str]]:
    """The rows of a `name,country,program` CSV file."""
    with path.open(newline="", encoding="utf-8") as f:
        return [
            {"name": r["name"], "country": r["country"], "program": r["program"]}
            for r in csv.DictReader(f)
        ]


def screen(name: str, country: str | None = None, path: Path = SANCTIONS_FILE) -> dict[str, Any]:
    """Screen one company: `result` is `match` or `no_match`, with the rows that matched."""
    wanted = normalize_name(name)
    rows = load_list(path)
    matches = [r for r in rows if normalize_name(r["name"]) == wanted]
    if country:
        matches = [{**r, "same_country": r["country"].upper() == country.upper()} for r in matches]
    return {
        "screened_name": name,
        "normalized_name": wanted,
        "country": country,
        "result": "match" if matches else "no_match",
        "matches": matches,
        "entries_screened": len(rows),
        "list": path.name,
    }
