"""The company registry the supplier check looks suppliers up in (a fixed table in the demo)."""

from __future__ import annotations

from typing import Any

from waypoint.demo.sanctions import normalize_name

COMPANIES: dict[str, dict[str, str]] = {
    normalize_name(c["name"]): c
    for c in [
        {"name": "Lindqvist Office Furniture AB", "country": "SE", "id": "SE556789-1234"},
        {"name": "Sedia Nova S.r.l.", "country": "IT", "id": "IT-MI-2291047"},
        {"name": "Caspian Hydraulic Works", "country": "IR", "id": "IR-10861234567"},
    ]
}


def look_up(name: str) -> dict[str, Any]:
    """The registry entry for a company name (legal forms and case ignored), or `found: false`."""
    entry = COMPANIES.get(normalize_name(name))
    if entry is None:
        return {"name": name, "found": False}
    return {"name": entry["name"], "found": True, "country": entry["country"], "id": entry["id"]}
